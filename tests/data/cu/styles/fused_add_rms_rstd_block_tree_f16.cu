// Fused add + RMSNorm that also keeps each row's reciprocal RMS for the backward pass (as Liger's and flash-attn's
// fused add RMSNorm forwards do), in fp16: inputs first, x read, the residual updated in place with the sum, the
// normalized row to a buffer of its own, eps an argument, one block of 512 a row (the row count from the grid), a
// shared-memory tree for the sum of squares, the normalized value rounded to half before the weight multiply.
#include <cuda_fp16.h>
/* kerntune:
args  = ["x: in f16[T * D]", "residual: inout f16[T * D]", "gamma: in f16[D]", "eps: f32 = 1e-6", "y: out f16[T * D]",
         "rstd: out f32[T]", "D: i32 = D"]
sizes = [{ T = 512, D = 4096 }, { T = 7, D = 5120 }]
grid  = "T"
block = 512
*/
__global__ void add_rmsnorm_fwd_rstd(const __half* __restrict__ x, __half* __restrict__ residual,
                                     const __half* __restrict__ gamma, float eps, __half* __restrict__ y,
                                     float* __restrict__ rstd, int D) {
  __shared__ float red[512];
  const size_t off = (size_t)blockIdx.x * D;
  float ss = 0.f;
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    const __half z = __float2half(__half2float(x[off + i]) + __half2float(residual[off + i]));
    residual[off + i] = z;
    const float zf = __half2float(z);
    ss += zf * zf;
  }
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float r = rsqrtf(red[0] / (float)D + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int i = threadIdx.x; i < D; i += blockDim.x)
    y[off + i] = __float2half(__half2float(residual[off + i]) * r) * gamma[i];
}

void add_rmsnorm_fwd_rstd_launch(const __half* x, __half* residual, const __half* gamma, float eps, __half* y,
                                 float* rstd, int T, int D, cudaStream_t s) {
  add_rmsnorm_fwd_rstd<<<T, 512, 0, s>>>(x, residual, gamma, eps, y, rstd, D);
}
