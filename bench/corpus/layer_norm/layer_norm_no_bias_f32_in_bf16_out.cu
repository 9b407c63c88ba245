// LayerNorm without a bias (OLMo / StableLM `bias=False`: a learned gamma, no beta) from fp32 activations to a bf16
// output: the residual stream arrives in fp32 and the normalized row leaves in bf16 for the next GEMM, gamma in
// fp32. One warp per row and 4 rows per 1-D block of 128 threads (row = blockIdx.x * 4 + threadIdx.x / 32, lane =
// threadIdx.x % 32), the row count an argument checked by each warp, eps an argument. Two reduction passes over the
// row in global memory, each closed by an xor butterfly so every lane holds the result: the mean, then the variance
// as the mean of (x - mean)^2; a third pass writes y = bf16((x - mean) * rstd * gamma), fp32 math, one rounding.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace layernorm {

constexpr int kWarpSize = 32;
constexpr int kRowsPerBlock = 4;
constexpr int kThreads = kRowsPerBlock * kWarpSize;  // 128

__device__ __forceinline__ float warp_all_reduce_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/* kerntune:
args  = ["out: out bf16[rows * hidden]", "x: in f32[rows * hidden]", "gamma: in f32[hidden]", "rows: i32 = rows",
         "hidden: i32 = hidden", "eps: f32 = 1e-5"]
sizes = [{ rows = 8192, hidden = 4096 }, { rows = 12, hidden = 2560 }, { rows = 1001, hidden = 2561 }]
grid  = "cdiv(rows, 4)"
block = "128"
*/
__global__ void layer_norm_no_bias_kernel(__nv_bfloat16* __restrict__ out, const float* __restrict__ x,
                                          const float* __restrict__ gamma, const int rows, const int hidden,
                                          const float eps) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= rows) return;  // the whole warp leaves together; there is no block barrier below

  const float* x_row = x + static_cast<int64_t>(row) * hidden;
  __nv_bfloat16* out_row = out + static_cast<int64_t>(row) * hidden;

  // pass 1: mean
  float sum = 0.0f;
  for (int i = lane; i < hidden; i += kWarpSize) sum += x_row[i];
  const float mean = warp_all_reduce_sum(sum) / static_cast<float>(hidden);

  // pass 2: variance of (x - mean)
  float sq = 0.0f;
  for (int i = lane; i < hidden; i += kWarpSize) {
    const float d = x_row[i] - mean;
    sq += d * d;
  }
  const float var = warp_all_reduce_sum(sq) / static_cast<float>(hidden);
  const float rstd = rsqrtf(var + eps);

  // y = (x - mean) * rstd * gamma, no beta
  for (int i = lane; i < hidden; i += kWarpSize) {
    out_row[i] = __float2bfloat16((x_row[i] - mean) * rstd * gamma[i]);
  }
}

}  // namespace layernorm

// x: [rows, hidden] fp32; gamma: [hidden] fp32; out: [rows, hidden] bf16.
void layer_norm_no_bias_f32_bf16(__nv_bfloat16* out, const float* x, const float* gamma, int rows, int hidden,
                                 float eps, cudaStream_t stream) {
  if (rows == 0) return;
  const dim3 block(layernorm::kThreads);
  const dim3 grid((rows + layernorm::kRowsPerBlock - 1) / layernorm::kRowsPerBlock);
  layernorm::layer_norm_no_bias_kernel<<<grid, block, 0, stream>>>(out, x, gamma, rows, hidden, eps);
}
