// Rotary with the Llama 3.1 frequency rescaling computed in the kernel, FlashInfer's BatchQKApplyLlama31RotaryPosIds
// convention: no cos/sin cache; pair i's frequency f = __powf(rope_rcp_theta, 2i / rotary_dim), then smoothed between
// the interpolated f * rope_rcp_scale and f itself by s = clamp(f * smooth_a + smooth_b, 0, 1) (smooth_a = old
// context / (2 pi (high_freq_factor - low_freq_factor)), smooth_b = -1 / (high / low - 1), both from the host):
// f' = (1 - s) * (f * rope_rcp_scale) + s * f, the angle pos * f' through __sincosf. NeoX pairs, q and k out of place,
// [nnz, heads, head_dim], int32 position ids, partial rotary copied through. One block per token, a warp per head.
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["q: in bf16[nnz * nq * hd]", "k: in bf16[nnz * nk * hd]", "q_rope: out bf16[nnz * nq * hd]",
         "k_rope: out bf16[nnz * nk * hd]", "pos_ids: in i32[nnz] ~ randint(0, 8192)", "num_qo_heads: i32 = nq",
         "num_kv_heads: i32 = nk", "head_dim: i32 = hd", "rotary_dim: i32 = rd", "smooth_a: f32 = 434.6",
         "smooth_b: f32 = -0.3333", "rope_rcp_scale: f32 = 0.125", "rope_rcp_theta: f32 = 0.000002"]
sizes = [{ nnz = 1024, nq = 32, nk = 8, hd = 128, rd = 128 }, { nnz = 7, nq = 6, nk = 2, hd = 64, rd = 32 }]
grid  = "nnz"
block = "128"
*/
__global__ void rope_llama31_pos_ids(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                     __nv_bfloat16* __restrict__ q_rope, __nv_bfloat16* __restrict__ k_rope,
                                     const int32_t* __restrict__ pos_ids, int num_qo_heads, int num_kv_heads,
                                     int head_dim, int rotary_dim, float smooth_a, float smooth_b,
                                     float rope_rcp_scale, float rope_rcp_theta) {
  const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const float pos = (float)pos_ids[t];
  const int half = rotary_dim / 2;
  for (int h = warp; h < num_qo_heads + num_kv_heads; h += warps) {
    const bool is_q = h < num_qo_heads;
    const size_t base = is_q ? ((size_t)t * num_qo_heads + h) * head_dim
                             : ((size_t)t * num_kv_heads + (h - num_qo_heads)) * head_dim;
    const __nv_bfloat16* src = (is_q ? q : k) + base;
    __nv_bfloat16* dst = (is_q ? q_rope : k_rope) + base;
    for (int i = lane; i < half; i += 32) {
      float freq = __powf(rope_rcp_theta, float(2 * i) / float(rotary_dim));
      float smooth = freq * smooth_a + smooth_b;
      smooth = fmaxf(0.0f, fminf(1.0f, smooth));
      freq = (1 - smooth) * (freq * rope_rcp_scale) + smooth * freq;
      float sn, cs;
      __sincosf(pos * freq, &sn, &cs);
      const float x0 = __bfloat162float(src[i]), x1 = __bfloat162float(src[i + half]);
      dst[i] = __float2bfloat16(x0 * cs - x1 * sn);
      dst[i + half] = __float2bfloat16(x1 * cs + x0 * sn);
    }
    for (int i = rotary_dim + lane; i < head_dim; i += 32) dst[i] = src[i];
  }
}

void rope_llama31_launch(const __nv_bfloat16* q, const __nv_bfloat16* k, __nv_bfloat16* q_rope, __nv_bfloat16* k_rope,
                         const int32_t* pos_ids, int nnz, int num_qo_heads, int num_kv_heads, int head_dim,
                         int rotary_dim, float rope_scale, float rope_theta, float low_freq_factor,
                         float high_freq_factor, float old_context_length, cudaStream_t stream) {
  const float smooth_a = old_context_length / (2 * 3.14159265358979f * (high_freq_factor - low_freq_factor));
  const float smooth_b = -1.0f / (high_freq_factor / low_freq_factor - 1.0f);
  rope_llama31_pos_ids<<<nnz, 128, 0, stream>>>(q, k, q_rope, k_rope, pos_ids, num_qo_heads, num_kv_heads, head_dim,
                                                rotary_dim, smooth_a, smooth_b, 1.0f / rope_scale, 1.0f / rope_theta);
}
