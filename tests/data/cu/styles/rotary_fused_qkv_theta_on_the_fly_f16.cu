// Rotary applied in place to the q and k heads of one fused qkv buffer [tokens, (num_q_heads + 2 * num_kv_heads) *
// head_dim] (the v heads after them untouched), the angles computed on the fly as MLC-LLM's and TensorRT-LLM's fused
// QKV kernels do (no cos/sin cache): inv_freq = 1 / powf(rope_theta, 2i / head_dim), theta = pos * inv_freq * scale
// (a linear position-interpolation scale), cosf / sinf; NeoX pairs over the whole head, fp32 math, one rounding;
// int32 positions. One block per token, its threads over the (q and k head, pair) range.
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["qkv: inout f16[tokens * (nq + 2 * nkv) * hd]", "positions: in i32[tokens] ~ randint(0, 4096)",
         "num_q_heads: i32 = nq", "num_kv_heads: i32 = nkv", "head_dim: i32 = hd", "rope_theta: f32 = 10000.0",
         "scale: f32 = 1.0"]
sizes = [{ tokens = 1024, nq = 32, nkv = 8, hd = 128 }, { tokens = 5, nq = 12, nkv = 4, hd = 64 }]
grid  = "tokens"
block = "256"
*/
__global__ void fused_qkv_rope(__half* __restrict__ qkv, const int32_t* __restrict__ positions, int num_q_heads,
                               int num_kv_heads, int head_dim, float rope_theta, float scale) {
  const int t = blockIdx.x;
  const int half = head_dim / 2;
  const float pos = (float)positions[t];
  __half* row = qkv + (size_t)t * (num_q_heads + 2 * num_kv_heads) * head_dim;
  for (int j = threadIdx.x; j < (num_q_heads + num_kv_heads) * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    const float inv_freq = 1.0f / powf(rope_theta, (float)(2 * i) / (float)head_dim);
    const float theta = pos * inv_freq * scale;
    const float c = cosf(theta), s = sinf(theta);
    __half* x = row + (size_t)h * head_dim;
    const float x0 = __half2float(x[i]), x1 = __half2float(x[i + half]);
    x[i] = __float2half(x0 * c - x1 * s);
    x[i + half] = __float2half(x1 * c + x0 * s);
  }
}

void fused_qkv_rope_launch(__half* qkv, const int32_t* positions, int num_tokens, int num_q_heads, int num_kv_heads,
                           int head_dim, float rope_theta, float scale, cudaStream_t stream) {
  fused_qkv_rope<<<num_tokens, 256, 0, stream>>>(qkv, positions, num_q_heads, num_kv_heads, head_dim, rope_theta,
                                                 scale);
}
