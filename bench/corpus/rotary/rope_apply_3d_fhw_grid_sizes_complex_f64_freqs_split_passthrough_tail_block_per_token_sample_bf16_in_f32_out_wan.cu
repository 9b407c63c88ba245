// 3-D (frame, height, width) rotary embedding in the style of Wan2.1 (Wan-Video/Wan2.1, wan/modules/model.py:
// rope_params and rope_apply, applied to q and k of every WanSelfAttention of the video DiT), a CUDA port of the
// PyTorch function keeping its layouts and its precision:
//   x [B, L, N, C] bf16 (the q or k projection after its RMSNorm; C = head_dim), out [B, L, N, C] f32 OUT OF
//   PLACE (rope_apply returns torch.stack(output).float())
//   grid_sizes [B, 3] int64: each sample's latent grid (f, h, w); its first seq_len = f * h * w tokens are
//   rotated, the rest of the L padded tokens are PASSED THROUGH (torch.cat([x_i, x[i, seq_len:]]), widened to
//   float)
//   freqs [1024, C / 2] complex128 = cat of rope_params(1024, C - 4 * (C // 6)), rope_params(1024, 2 * (C // 6))
//   twice, stored as view_as_real pairs (re, im) of doubles; it is SPLIT BY COLUMNS into c - 2 * (c // 3),
//   c // 3, c // 3 pairs (c = C / 2): the first part indexed by the token's frame, the second by its row, the
//   third by its column (token l = (fi * h + hi) * w + wi)
//   GPT-J pairing (view_as_complex of (.., c, 2): channels 2j, 2j + 1), the product computed in FLOAT64 as
//   rope_apply does (x.to(torch.float64) times the complex128 table), rounded once to f32 at the store
//   launch: the Python loop over samples and the per-token multiply as ONE kernel: grid (L, B), one block per
//   (token, sample), 256 threads striding over the N * c pairs of the token; int64 grid sizes read per block
// The port is ours (Wan runs it in eager PyTorch under autocast(enabled=False)); argument order out, x,
// grid_sizes, freqs, then the sizes. The freqs table is drawn uniform(-1, 1) instead of unit phasors, which the
// kernel does not rely on; grid sizes are drawn in [1, 32) so that every f, h, w stays inside the 1024-row table
// and seq_len may exceed L (only the first L tokens exist, as x[i, :seq_len] slices). No bug found.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

/* kerntune:
args  = ["out: out f32[B * L * N * C]", "x: in bf16[B * L * N * C]", "grid_sizes: in i64[B * 3] ~ randint(1, 32)",
         "freqs: in f64[1024 * C] ~ uniform(-1, 1)", "s: i32 = L", "n: i32 = N", "c: i32 = C / 2"]
sizes = [{ B = 1, L = 32760, N = 12, C = 128 }, { B = 2, L = 4, N = 40, C = 128 },
         { B = 3, L = 1001, N = 5, C = 96 }]
grid  = ["L", "B"]
block = 256
*/
__global__ void rope_apply_kernel(float* __restrict__ out, const __nv_bfloat16* __restrict__ x,
                                  const int64_t* __restrict__ grid_sizes, const double* __restrict__ freqs, int s,
                                  int n, int c) {
  const int l = blockIdx.x;  // token
  const int i = blockIdx.y;  // sample
  const int64_t f = grid_sizes[i * 3 + 0];
  const int64_t h = grid_sizes[i * 3 + 1];
  const int64_t w = grid_sizes[i * 3 + 2];
  const int64_t seq_len = f * h * w;

  const int64_t base = ((int64_t)i * s + l) * n * 2 * c;
  const __nv_bfloat16* x_i = x + base;
  float* out_i = out + base;

  if (l >= seq_len) {
    // x[i, seq_len:] is appended unrotated
    for (int k = threadIdx.x; k < n * 2 * c; k += blockDim.x) {
      out_i[k] = __bfloat162float(x_i[k]);
    }
    return;
  }

  // position of the token in the (f, h, w) grid
  const int fi = (int)(l / (h * w));
  const int hi = (int)((l / w) % h);
  const int wi = (int)(l % w);

  // freqs.split([c - 2 * (c // 3), c // 3, c // 3], dim=1)
  const int c0 = c - 2 * (c / 3);
  const int c1 = c / 3;

  for (int k = threadIdx.x; k < n * c; k += blockDim.x) {
    const int j = k % c;  // complex channel within the head
    const int pos = j < c0 ? fi : (j < c0 + c1 ? hi : wi);
    const double fr = freqs[((int64_t)pos * c + j) * 2 + 0];
    const double fim = freqs[((int64_t)pos * c + j) * 2 + 1];

    const double xr = (double)__bfloat162float(x_i[2 * k + 0]);
    const double xim = (double)__bfloat162float(x_i[2 * k + 1]);

    // view_as_real(x_i * freqs_i), then .float()
    out_i[2 * k + 0] = (float)(xr * fr - xim * fim);
    out_i[2 * k + 1] = (float)(xr * fim + xim * fr);
  }
}

// x: device [B, L, N, C] bf16; grid_sizes: device [B, 3] int64; freqs: device [1024, C / 2] complex128 as
// (re, im) doubles; out: device [B, L, N, C] f32.
void wan_rope_apply(float* out, const __nv_bfloat16* x, const int64_t* grid_sizes, const double* freqs, int B, int L,
                    int N, int C, cudaStream_t stream) {
  constexpr int kThreads = 256;
  dim3 grid(L, B);
  dim3 block(kThreads);
  rope_apply_kernel<<<grid, block, 0, stream>>>(out, x, grid_sizes, freqs, L, N, C / 2);
}
