// Gemma fused residual add + RMSNorm (fp16), the contract of SGLang's / FlashInfer's gemma_fused_add_rmsnorm:
// both tensors updated in place, residual = fp16(x + residual) (added as __half2 pairs, rounded as stored), then
// x = fp16(residual * rsqrt(mean(residual^2) + eps) * (weight_offset + w)) in fp32, the weight's offset a
// runtime argument (1.0 for Gemma, 0.0 for a plain RMSNorm). One row per block of 128 threads (a literal),
// __half2 pairs, warp shuffles then the four warps' partials through shared memory; the row count is an
// argument and the grid may be shorter than it (a loop over rows with gridDim.x as the stride).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>

/* kerntune:
args  = ["x: inout f16[rows * dim]", "residual: inout f16[rows * dim]", "weight: in f16[dim]",
         "rows: i32 = rows", "dim: i32 = dim", "weight_offset: f32 = 1.0", "eps: f32 = 1e-6"]
sizes = [{ rows = 8192, dim = 2304 }, { rows = 5, dim = 3584 }, { rows = 777, dim = 4608 }]
grid  = "min(rows, 8192)"
block = 128
*/
__global__ void gemma_fused_add_rmsnorm(__half* x, __half* residual, const __half* weight, int rows, int dim,
                                        float weight_offset, float eps) {
  __shared__ float warp_sums[4];
  const int half_dim = dim >> 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    __half2* x2 = reinterpret_cast<__half2*>(x) + (size_t)row * half_dim;
    __half2* r2 = reinterpret_cast<__half2*>(residual) + (size_t)row * half_dim;
    float acc = 0.f;
    for (int i = threadIdx.x; i < half_dim; i += 128) {
      const __half2 z = __hadd2(x2[i], r2[i]);
      r2[i] = z;
      const float2 zf = __half22float2(z);
      acc += zf.x * zf.x + zf.y * zf.y;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    const float total = warp_sums[0] + warp_sums[1] + warp_sums[2] + warp_sums[3];
    const float scale = rsqrtf(total / dim + eps);
    const __half2* w2 = reinterpret_cast<const __half2*>(weight);
    for (int i = threadIdx.x; i < half_dim; i += 128) {
      const float2 z = __half22float2(r2[i]);
      const float2 w = __half22float2(w2[i]);
      x2[i] = __floats2half2_rn(z.x * scale * (weight_offset + w.x), z.y * scale * (weight_offset + w.y));
    }
    __syncthreads();  // warp_sums is reused by the next row
  }
}

void gemma_fused_add_rmsnorm_fp16(__half* x, __half* residual, const __half* weight, int rows, int dim,
                                  float weight_offset, float eps, cudaStream_t stream) {
  gemma_fused_add_rmsnorm<<<std::min(rows, 8192), 128, 0, stream>>>(x, residual, weight, rows, dim, weight_offset,
                                                                    eps);
}
