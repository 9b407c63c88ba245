// Rotary embedding in the style of Genmo's Mochi 1 (genmoai/mochi, src/genmo/mochi_preview/dit/joint_model/:
// rope_mixed.py compute_mixed_rotation and temporal_rope.py apply_rotary_emb_qk_real, applied to the visual
// q and k of every AsymmetricAttention block after their QK RMSNorm), a CUDA port keeping its layouts and
// rounding:
//   xqk [B, S, H, D] bf16 (visual tokens; S = T * H_p * W_p latent patches), out [B, S, H, D] bf16 OUT OF PLACE
//   (the result is a new tensor built by torch.stack(..).flatten(-2))
//   freqs_cos, freqs_sin [S, H, D / 2] f32: Mochi's MIXED RoPE learns a frequency matrix per head
//   ([3, H, D / 2], einsum with the (t, y, x) position of each token), so the tables are per TOKEN AND HEAD,
//   shared by the batch; no position ids, no cache lookup
//   GPT-J pairing (xqk[..., 0::2] with xqk[..., 1::2]); bf16 times f32 promotes to f32, so each output is
//   cos_part = (even * cos - odd * sin).type_as(xqk), sin_part = (even * sin + odd * cos).type_as(xqk): f32 math,
//   one bf16 rounding per output, re-interleaved by stack([cos_part, sin_part], -1)
//   launch: elementwise over the B * S * H * D / 2 pairs, one pair per thread read and written as one
//   __nv_bfloat162, 64-bit flat index, constexpr 512 threads, grid ceil(pairs / 512), the table row is the pair
//   index modulo S * H * D / 2 (broadcast over B)
// The port is ours (Mochi runs the PyTorch function eagerly); argument order follows
// apply_rotary_emb_qk_real(xqk, freqs_cos, freqs_sin) with the output after the inputs and the sizes last.
// cos/sin are drawn uniform(-1, 1). D must be even (it is 128 in Mochi). No bug found.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

constexpr int kRopeThreads = 512;

/* kerntune:
args  = ["xqk: in bf16[B * S * H * D]", "freqs_cos: in f32[S * H * D / 2] ~ uniform(-1, 1)",
         "freqs_sin: in f32[S * H * D / 2] ~ uniform(-1, 1)", "out: out bf16[B * S * H * D]",
         "num_pairs: i64 = B * S * H * D / 2", "table_pairs: i64 = S * H * D / 2"]
sizes = [{ B = 1, S = 11130, H = 24, D = 128 }, { B = 2, S = 4, H = 24, D = 128 },
         { B = 1, S = 1001, H = 3, D = 98 }]
grid  = "cdiv(B * S * H * D / 2, 512)"
block = 512
*/
__global__ void apply_rotary_emb_qk_real_kernel(const __nv_bfloat16* __restrict__ xqk,
                                                const float* __restrict__ freqs_cos,
                                                const float* __restrict__ freqs_sin, __nv_bfloat16* __restrict__ out,
                                                int64_t num_pairs, int64_t table_pairs) {
  const int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= num_pairs) return;

  // (b, s, h, j) -> table (s, h, j): the tables broadcast over the batch
  const int64_t t = p % table_pairs;
  const float cos_v = freqs_cos[t];
  const float sin_v = freqs_sin[t];

  // xqk_even = xqk[..., 0::2], xqk_odd = xqk[..., 1::2]
  const __nv_bfloat162 pair = reinterpret_cast<const __nv_bfloat162*>(xqk)[p];
  const float x_even = __low2float(pair);
  const float x_odd = __high2float(pair);

  const __nv_bfloat16 cos_part = __float2bfloat16(x_even * cos_v - x_odd * sin_v);
  const __nv_bfloat16 sin_part = __float2bfloat16(x_even * sin_v + x_odd * cos_v);

  // torch.stack([cos_part, sin_part], dim=-1).flatten(-2)
  reinterpret_cast<__nv_bfloat162*>(out)[p] = __halves2bfloat162(cos_part, sin_part);
}

// xqk, out: device [B, S, H, D] bf16; freqs_cos, freqs_sin: device [S, H, D / 2] f32.
void apply_rotary_emb_qk_real(const __nv_bfloat16* xqk, const float* freqs_cos, const float* freqs_sin,
                              __nv_bfloat16* out, int B, int S, int H, int D, cudaStream_t stream) {
  const int64_t table_pairs = (int64_t)S * H * (D / 2);
  const int64_t num_pairs = (int64_t)B * table_pairs;
  const int64_t blocks = (num_pairs + kRopeThreads - 1) / kRopeThreads;
  apply_rotary_emb_qk_real_kernel<<<(unsigned)blocks, kRopeThreads, 0, stream>>>(xqk, freqs_cos, freqs_sin, out,
                                                                                  num_pairs, table_pairs);
}
