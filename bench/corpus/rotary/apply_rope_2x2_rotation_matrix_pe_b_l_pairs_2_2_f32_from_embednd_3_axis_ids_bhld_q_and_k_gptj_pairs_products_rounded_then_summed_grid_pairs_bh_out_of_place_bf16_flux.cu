// Rotary embedding in the style of Black Forest Labs FLUX (black-forest-labs/flux, src/flux/math.py: apply_rope(xq, xk,
// freqs_cis), called by attention(q, k, v, pe) in every double- and single-stream block, with pe from
// modules/layers.py EmbedND; FLUX.1 is BFL's rectified-flow image transformer, its reference inference code),
// written as the one CUDA kernel the eager PyTorch expression amounts to:
//   xq, xk [B, H, L, D] bf16 contiguous (the txt + img tokens concatenated along L by torch.cat, D = 128),
//   freqs_cis = pe [B, 1, L, D / 2, 2, 2] fp32: per token and per pair a 2 x 2 ROTATION MATRIX [[cos, -sin],
//   [sin, cos]] (rope(): stack([cos, -sin, sin, cos]) rearranged "(i j) -> i j"), built by EmbedND from 3-axis
//   position ids (axes_dim 16 / 56 / 56 concatenated along the pairs, theta 10000) in float64 and stored as fp32;
//   the head dimension of pe is broadcast (size 1), its batch is not.
//   GPT-J pairs: xq.float().reshape(..., D / 2, 1, 2), so pair i is (x[2i], x[2i + 1]);
//   out[2i + r] = F[i][r][0] * x[2i] + F[i][r][1] * x[2i + 1] for r = 0, 1: fp32 math as eager runs it (each product
//   a rounded fp32 multiply, then a rounded add: no FMA), one rounding to bf16 (.type_as(xq)); OUT OF PLACE (new
//   xq_out, xk_out [B, H, L, D]); q and k share the matrices and are rotated by the same thread.
//   One thread per (b, h, l, pair): grid (cdiv(L * D / 2, 256), B * H), 256 threads; each thread reads its 4 matrix
//   entries, the q pair and the k pair with scalar loads.
// No bug found. Changed: the four eager kernels per tensor (float(), two broadcast multiplies, the add and the
// type_as copy) are one launch for q and k together; the torch call became a C++ launcher with device pointers,
// sizes and a stream.
#include <assert.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace flux {

constexpr int kThreads = 256;

/* kerntune:
args  = ["xq: in bf16[B * H * L * 128]", "xk: in bf16[B * H * L * 128]",
         "freqs_cis: in f32[B * L * 64 * 4] ~ uniform(-1, 1)", "xq_out: out bf16[B * H * L * 128]",
         "xk_out: out bf16[B * H * L * 128]", "H: i32 = H", "L: i32 = L", "D: i32 = 128"]
sizes = [{ B = 1, H = 24, L = 4608 }, { B = 2, H = 24, L = 4 }, { B = 1, H = 24, L = 1101 }]
grid  = ["cdiv(L * 64, 256)", "B * H"]
block = 256
*/
__global__ void __launch_bounds__(kThreads)
    apply_rope_kernel(const __nv_bfloat16* xq, const __nv_bfloat16* xk, const float* freqs_cis,
                      __nv_bfloat16* xq_out, __nv_bfloat16* xk_out, int H, int L, int D) {
  const int half = D / 2;
  const int bh = blockIdx.y;  // b * H + h
  const int b = bh / H;
  const int p = blockIdx.x * kThreads + threadIdx.x;  // l * (D / 2) + pair
  if (p >= L * half) return;
  const int l = p / half;
  const int i = p % half;

  // freqs_cis[b, 0, l, i, r, j]
  const float* F = freqs_cis + (((int64_t)b * L + l) * half + i) * 4;
  const float f00 = F[0], f01 = F[1], f10 = F[2], f11 = F[3];

  const int64_t off = ((int64_t)bh * L + l) * D + 2 * i;  // [b, h, l, 2i]
  {
    const float x0 = __bfloat162float(xq[off]);
    const float x1 = __bfloat162float(xq[off + 1]);
    // freqs_cis[..., 0] * xq_[..., 0] + freqs_cis[..., 1] * xq_[..., 1]
    xq_out[off] = __float2bfloat16(__fadd_rn(__fmul_rn(f00, x0), __fmul_rn(f01, x1)));
    xq_out[off + 1] = __float2bfloat16(__fadd_rn(__fmul_rn(f10, x0), __fmul_rn(f11, x1)));
  }
  {
    const float x0 = __bfloat162float(xk[off]);
    const float x1 = __bfloat162float(xk[off + 1]);
    xk_out[off] = __float2bfloat16(__fadd_rn(__fmul_rn(f00, x0), __fmul_rn(f01, x1)));
    xk_out[off + 1] = __float2bfloat16(__fadd_rn(__fmul_rn(f10, x0), __fmul_rn(f11, x1)));
  }
}

}  // namespace flux

// xq, xk: device [B, H, L, D] bf16; freqs_cis (pe): [B, 1, L, D / 2, 2, 2] fp32; xq_out, xk_out: [B, H, L, D] bf16.
void apply_rope(const __nv_bfloat16* xq, const __nv_bfloat16* xk, const float* freqs_cis, __nv_bfloat16* xq_out,
                __nv_bfloat16* xk_out, int B, int H, int L, int D, cudaStream_t stream) {
  assert(D % 2 == 0);
  if (B == 0 || H == 0 || L == 0) return;
  const dim3 grid((L * (D / 2) + flux::kThreads - 1) / flux::kThreads, B * H);
  flux::apply_rope_kernel<<<grid, flux::kThreads, 0, stream>>>(xq, xk, freqs_cis, xq_out, xk_out, H, L, D);
}
