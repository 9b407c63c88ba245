// gpt-oss's clamped SwiGLU over interleaved (gate, up) pairs as vLLM's swigluoai_and_mul reads them (gate at the
// even column 2j, up at the odd 2j + 1), bf16 in and out: the gate clamped from above by a conditional, up clamped
// on both sides, sigmoid as 1 / (1 + expf(-g * alpha)) times g, the +1 on up a literal, alpha a #define and the limit
// a literal; fp32 math, one rounding at the store. A 2-D grid: blockIdx.x the token, blockIdx.y a chunk of columns.
#include <cuda_bf16.h>
#include <cstdint>

#define OAI_ALPHA 1.702f

/* kerntune:
args  = ["gate_up: in bf16[num_tokens * 2 * d] ~ uniform(-10, 10)", "out: out bf16[num_tokens * d]", "d: i32 = d"]
sizes = [{ num_tokens = 256, d = 2880 }, { num_tokens = 5, d = 1001 }]
grid  = ["num_tokens", "cdiv(d, 128)"]
block = "128"
*/
__global__ void clamped_swiglu_pairs(const __nv_bfloat16* __restrict__ gate_up, __nv_bfloat16* __restrict__ out,
                                     const int d) {
  const int64_t token = blockIdx.x;
  const int j = blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const float gate = __bfloat162float(__ldg(&gate_up[token * 2 * d + 2 * j]));
  const float up = __bfloat162float(__ldg(&gate_up[token * 2 * d + 2 * j + 1]));
  const float g = gate > 7.0f ? 7.0f : gate;
  const float u = up > 7.0f ? 7.0f : (up < -7.0f ? -7.0f : up);
  const float sig = 1.0f / (1.0f + expf(-g * OAI_ALPHA));
  out[token * d + j] = __float2bfloat16((u + 1.0f) * (g * sig));
}

void clamped_swiglu(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int num_tokens, int d, cudaStream_t stream) {
  const dim3 grid(num_tokens, (d + 127) / 128);
  clamped_swiglu_pairs<<<grid, 128, 0, stream>>>(gate_up, out, d);
}
