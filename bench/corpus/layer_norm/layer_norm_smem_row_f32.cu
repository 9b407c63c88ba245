// LayerNorm (fp32), one row per block of 128 threads (a constexpr), the row cached in dynamic shared memory on the
// first read so the mean and the (two-pass, exact) variance and the output come from shared memory, as
// OneFlow-style "block smem" normalization kernels do. Rows up to 11k floats fit the default 48 KB.
#include <cuda_runtime.h>

constexpr int kBlockSize = 128;

/* kerntune:
args  = ["x: in f32[rows * cols]", "gamma: in f32[cols]", "beta: in f32[cols]", "y: out f32[rows * cols]",
         "cols: i32 = cols", "eps: f32 = 1e-5"]
sizes = [{ rows = 4096, cols = 8192 }, { rows = 32, cols = 8192 }, { rows = 1000, cols = 5003 }]
grid  = "rows"
block = "128"
smem  = "cols * 4"
*/
__global__ void layernorm_smem_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                      const float* __restrict__ beta, float* __restrict__ y, int cols, float eps) {
  extern __shared__ float row_buf[];
  __shared__ float red[kBlockSize];
  const int tid = threadIdx.x;
  const float* xr = x + (size_t)blockIdx.x * cols;
  float* yr = y + (size_t)blockIdx.x * cols;

  float s = 0.f;
  for (int i = tid; i < cols; i += kBlockSize) {
    const float v = xr[i];
    row_buf[i] = v;
    s += v;
  }
  red[tid] = s;
  __syncthreads();
  for (int k = kBlockSize / 2; k > 0; k >>= 1) {
    if (tid < k) red[tid] += red[tid + k];
    __syncthreads();
  }
  const float mean = red[0] / cols;
  __syncthreads();

  float q = 0.f;
  for (int i = tid; i < cols; i += kBlockSize) {
    const float d = row_buf[i] - mean;
    q += d * d;
  }
  red[tid] = q;
  __syncthreads();
  for (int k = kBlockSize / 2; k > 0; k >>= 1) {
    if (tid < k) red[tid] += red[tid + k];
    __syncthreads();
  }
  const float rstd = rsqrtf(red[0] / cols + eps);

  for (int i = tid; i < cols; i += kBlockSize) yr[i] = (row_buf[i] - mean) * rstd * gamma[i] + beta[i];
}

void layernorm_f32(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols, float eps,
                   cudaStream_t stream) {
  const size_t smem = cols * sizeof(float);
  layernorm_smem_kernel<<<rows, kBlockSize, smem, stream>>>(x, gamma, beta, y, cols, eps);
}
