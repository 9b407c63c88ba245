// RMSNorm written as candle's (and llama.cpp's older) reduce kernels are: the block size passed as an int argument
// and used as the loop stride, a weight that may be null (checked in the kernel), no row-count argument (row =
// blockIdx.x * blockDim.y + threadIdx.y, no bound), extern "C"; bf16 in and out, the math in fp32 and one rounding.
// Arguments (x, dst, alpha, ncols, block_size, eps).
#include <cuda_bf16.h>

__device__ __forceinline__ float warp_sum(float v) {
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m, 32);
  return v;
}

/* kerntune:
args  = ["x: in bf16[R * ncols]", "dst: out bf16[R * ncols]", "alpha: in bf16[ncols]", "ncols: i32 = ncols",
         "block_size: i32 = 1024", "eps: f32 = 1e-5"]
sizes = [{ R = 96, ncols = 4096 }, { R = 5, ncols = 1030 }]
grid  = "R"
block = "1024"
*/
extern "C" __global__ void rmsnorm_bf16(const __nv_bfloat16* x, __nv_bfloat16* dst, const __nv_bfloat16* alpha,
                                        const int ncols, const int block_size, const float eps) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const int tid = threadIdx.x;
  float tmp = 0.f;
  for (int col = tid; col < ncols; col += block_size) {
    const float xi = __bfloat162float(x[row * ncols + col]);
    tmp += xi * xi;
  }
  tmp = warp_sum(tmp);
  if (block_size > 32) {
    __shared__ float s_sum[32];
    if (tid % 32 == 0) s_sum[tid / 32] = tmp;
    __syncthreads();
    tmp = warp_sum(s_sum[tid % 32]);
  }
  const float scale = rsqrtf(tmp / ncols + eps);
  for (int col = tid; col < ncols; col += block_size) {
    const float a = alpha == nullptr ? 1.f : __bfloat162float(alpha[col]);
    dst[row * ncols + col] = __float2bfloat16(scale * __bfloat162float(x[row * ncols + col]) * a);
  }
}

void rmsnorm_bf16_launch(const __nv_bfloat16* x, __nv_bfloat16* dst, const __nv_bfloat16* alpha, int rows, int ncols,
                         float eps, cudaStream_t stream) {
  const int block_size = ncols < 1024 ? 32 : 1024;
  rmsnorm_bf16<<<rows, block_size, 0, stream>>>(x, dst, alpha, ncols, block_size, eps);
}
