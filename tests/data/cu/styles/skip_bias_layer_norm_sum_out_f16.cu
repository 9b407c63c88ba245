// Skip + bias + LayerNorm with the sum as a second, optional output (ONNX Runtime's SkipLayerNorm as exported BERT /
// ViT graphs run it), fp16 storage and fp32 math: sum = fp16(input + skip + bias) (one rounding), written to
// sum_output unless it is null and to output, then output normalized in place from the stored (rounded) sum.
// The outputs come first, no row-count argument (one row per block over the grid), eps an argument, a block sum
// helper with warp shuffles and a __shared__ array of the warps' partials.
#include <cuda_fp16.h>
#include <cstdint>

__device__ __forceinline__ float block_sum(float v, float* part) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
  if (threadIdx.x < 32)
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) part[0] = v;
  __syncthreads();
  v = part[0];
  __syncthreads();
  return v;
}

/* kerntune:
args  = ["output: out f16[rows * ld]", "sum_output: out f16[rows * ld]", "input: in f16[rows * ld]",
         "skip: in f16[rows * ld]", "gamma: in f16[ld]", "beta: in f16[ld]", "bias: in f16[ld]",
         "epsilon: f32 = 1e-12", "ld: i32 = ld"]
sizes = [{ rows = 2048, ld = 768 }, { rows = 77, ld = 1030 }]
grid  = "rows"
block = "256"
*/
__global__ void skip_bias_layer_norm(__half* output, __half* sum_output, const __half* input, const __half* skip,
                                     const __half* gamma, const __half* beta, const __half* bias, float epsilon,
                                     int ld) {
  __shared__ float part[32];
  const int64_t off = static_cast<int64_t>(blockIdx.x) * ld;
  float s = 0.f;
  for (int i = threadIdx.x; i < ld; i += blockDim.x) {
    const float v = __half2float(input[off + i]) + __half2float(skip[off + i]) + __half2float(bias[i]);
    const __half h = __float2half(v);
    if (sum_output != nullptr) sum_output[off + i] = h;
    output[off + i] = h;
    s += __half2float(h);
  }
  const float mean = block_sum(s, part) / ld;
  float q = 0.f;
  for (int i = threadIdx.x; i < ld; i += blockDim.x) {
    const float d = __half2float(output[off + i]) - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(block_sum(q, part) / ld + epsilon);
  for (int i = threadIdx.x; i < ld; i += blockDim.x)
    output[off + i] = __float2half((__half2float(output[off + i]) - mean) * rstd * __half2float(gamma[i]) +
                                   __half2float(beta[i]));
}

void skip_bias_layer_norm_launch(__half* output, __half* sum_output, const __half* input, const __half* skip,
                                 const __half* gamma, const __half* beta, const __half* bias, float epsilon, int ld,
                                 int rows, cudaStream_t st) {
  skip_bias_layer_norm<<<rows, 256, 0, st>>>(output, sum_output, input, skip, gamma, beta, bias, epsilon, ld);
}
