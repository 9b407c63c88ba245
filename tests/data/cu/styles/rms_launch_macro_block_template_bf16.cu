// RMSNorm bf16 (input, weight, output order), the block size a template argument the kernel strides by, launched
// through a LAUNCH(BLOCK) macro (its own ';' inside, used with and without one) for three block sizes chosen by the
// hidden size (the way FasterTransformer and TensorRT-LLM write their launchers); warp shuffles then one shared
// slot per warp; vLLM's rounding: x * inv rounded to bf16, then times the weight (one more rounding).
#include <cuda_bf16.h>

/* kerntune:
args  = ["input: in bf16[tokens * hidden]", "weight: in bf16[hidden]", "output: out bf16[tokens * hidden]",
         "hidden: i32 = hidden", "epsilon: f32 = 1e-5"]
sizes = [{ tokens = 2048, hidden = 4096 }, { tokens = 77, hidden = 3001 }]
grid  = "tokens"
block = "1024"
template_args = ["1024"]
*/
template <int BLOCK>
__global__ void rms_norm_block_kernel(const __nv_bfloat16* __restrict__ input,
                                      const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* __restrict__ output,
                                      const int hidden, const float epsilon) {
  __shared__ float warp_sums[BLOCK / 32];
  __shared__ float s_inv;
  const __nv_bfloat16* row = input + (size_t)blockIdx.x * hidden;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += BLOCK) {
    const float v = __bfloat162float(row[i]);
    ss += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < BLOCK / 32 ? warp_sums[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) s_inv = rsqrtf(t / (float)hidden + epsilon);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < hidden; i += BLOCK) {
    const __nv_bfloat16 n = __float2bfloat16(__bfloat162float(row[i]) * s_inv);
    output[(size_t)blockIdx.x * hidden + i] = __float2bfloat16(__bfloat162float(n) * __bfloat162float(weight[i]));
  }
}

#define LAUNCH_RMS_NORM(BLOCK)                                     \
  rms_norm_block_kernel<BLOCK><<<tokens, BLOCK, 0, stream>>>(input, \
                                                             weight, output, hidden, epsilon);

void rms_norm(const __nv_bfloat16* input, const __nv_bfloat16* weight, __nv_bfloat16* output, int tokens,
              int hidden, float epsilon, cudaStream_t stream) {
  if (hidden > 2048) {
    LAUNCH_RMS_NORM(1024)
  } else if (hidden > 512) {
    LAUNCH_RMS_NORM(512);
  } else {
    LAUNCH_RMS_NORM(128);
  }
}
