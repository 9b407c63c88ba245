// RMSNorm (fp16) with one warp per row and several rows per block (a 2-D block: threadIdx.x = lane, threadIdx.y =
// row in the block), as tutorial and OneFlow-style "warp" normalization kernels do; the row count is an argument
// and the last block checks it. Two passes over the row in global memory, fp32 throughout, one rounding.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define WARPS_PER_BLOCK 4

/* kerntune:
args  = ["x: in f16[rows * cols]", "w: in f16[cols]", "y: out f16[rows * cols]", "rows: i32 = rows",
         "cols: i32 = cols", "eps: f32 = 1e-5"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 64, cols = 5120 }, { rows = 1023, cols = 4097 }]
grid  = "cdiv(rows, 4)"
block = [32, 4]
*/
__global__ void rmsnorm_warp_kernel(const __half* __restrict__ x, const __half* __restrict__ w,
                                    __half* __restrict__ y, int rows, int cols, float eps) {
  const int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.y;
  if (row >= rows) return;  // whole warp leaves together; no block barrier below
  const int lane = threadIdx.x;
  const __half* xr = x + (size_t)row * cols;
  __half* yr = y + (size_t)row * cols;

  float ss = 0.f;
  for (int c = lane; c < cols; c += 32) {
    const float v = __half2float(xr[c]);
    ss += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, off);
  const float rstd = rsqrtf(ss / cols + eps);

  for (int c = lane; c < cols; c += 32) {
    yr[c] = __float2half(__half2float(xr[c]) * rstd * __half2float(w[c]));
  }
}

void rmsnorm_fp16(const __half* x, const __half* w, __half* y, int rows, int cols, float eps, cudaStream_t stream) {
  dim3 block(32, WARPS_PER_BLOCK);
  dim3 grid((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
  rmsnorm_warp_kernel<<<grid, block, 0, stream>>>(x, w, y, rows, cols, eps);
}
