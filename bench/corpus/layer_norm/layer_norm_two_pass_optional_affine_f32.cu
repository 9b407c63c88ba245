// LayerNorm forward (fp32 storage, fp32 math) in the style of PyTorch ATen's layer_norm_kernel.cu non-vectorized
// path, with the moments and the normalization fused into one kernel: int64_t sizes, a kernel template over the
// storage type T and the accumulation type T_ACC, kCUDANumThreads = 256 threads per row, a BlockReduceSum helper
// (warp __shfl_down_sync plus a 32-entry shared buffer, the result valid in thread 0) used twice: once for the
// mean, then once for the variance as the mean of (x - mean)^2 (an exact two-pass variance, each pass re-reading X
// from global memory), then a third pass writes Y. gamma and beta are optional (nullptr means 1 and 0), as are
// the mean and rstd outputs.
#include <cuda_runtime.h>
#include <cstdint>

namespace at {
namespace native {

constexpr int kCUDANumThreads = 256;
constexpr int kWarpSize = 32;

template <typename T_ACC>
__device__ __forceinline__ T_ACC WarpReduceSum(T_ACC val) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) val += __shfl_down_sync(0xffffffffu, val, offset);
  return val;
}

// Sum over the block; the result is valid in thread 0. `shared` holds one value per warp.
template <typename T_ACC>
__device__ __forceinline__ T_ACC BlockReduceSum(T_ACC val, T_ACC* shared) {
  const int lid = threadIdx.x % kWarpSize;
  const int wid = threadIdx.x / kWarpSize;
  val = WarpReduceSum(val);
  __syncthreads();  // the buffer may still be read by a previous call
  if (lid == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < blockDim.x / kWarpSize) ? shared[lid] : T_ACC(0);
  if (wid == 0) val = WarpReduceSum(val);
  return val;
}

/* kerntune:
args  = ["N: i64 = N", "eps: f32 = 1e-5", "X: in f32[M * N]", "gamma: in f32[N]", "beta: in f32[N]",
         "Y: out f32[M * N]", "mean: out f32[M]", "rstd: out f32[M]"]
sizes = [{ M = 8192, N = 4096 }, { M = 8, N = 12288 }, { M = 1001, N = 3079 }]
grid  = "M"
block = "256"
*/
template <typename T, typename T_ACC>
__global__ void LayerNormTwoPassForwardCUDAKernel(const int64_t N, const T_ACC eps, const T* __restrict__ X,
                                                  const T* __restrict__ gamma, const T* __restrict__ beta,
                                                  T* __restrict__ Y, T_ACC* __restrict__ mean,
                                                  T_ACC* __restrict__ rstd) {
  __shared__ T_ACC m_shared[kWarpSize];
  __shared__ T_ACC s_mean;
  __shared__ T_ACC s_rstd;
  const int64_t i = blockIdx.x;
  const T* X_row = X + i * N;
  T* Y_row = Y + i * N;

  T_ACC sum = 0;
  for (int64_t j = threadIdx.x; j < N; j += blockDim.x) sum += static_cast<T_ACC>(X_row[j]);
  sum = BlockReduceSum<T_ACC>(sum, m_shared);
  if (threadIdx.x == 0) s_mean = sum / static_cast<T_ACC>(N);
  __syncthreads();
  const T_ACC row_mean = s_mean;

  T_ACC sq = 0;
  for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
    const T_ACC d = static_cast<T_ACC>(X_row[j]) - row_mean;
    sq += d * d;
  }
  sq = BlockReduceSum<T_ACC>(sq, m_shared);
  if (threadIdx.x == 0) {
    const T_ACC var = sq / static_cast<T_ACC>(N);
    s_rstd = rsqrtf(var + eps);
    if (mean != nullptr) mean[i] = row_mean;
    if (rstd != nullptr) rstd[i] = s_rstd;
  }
  __syncthreads();
  const T_ACC row_rstd = s_rstd;

  for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
    const T_ACC g = gamma == nullptr ? T_ACC(1) : static_cast<T_ACC>(gamma[j]);
    const T_ACC b = beta == nullptr ? T_ACC(0) : static_cast<T_ACC>(beta[j]);
    Y_row[j] = static_cast<T>((static_cast<T_ACC>(X_row[j]) - row_mean) * row_rstd * g + b);
  }
}

}  // namespace native
}  // namespace at

// X: [M, N]; gamma, beta: [N] or nullptr; Y: [M, N]; mean, rstd: [M] or nullptr.
void LayerNormForwardTwoPassFloat(const float* X, const float* gamma, const float* beta, int64_t M, int64_t N,
                                  float eps, float* Y, float* mean, float* rstd, cudaStream_t stream) {
  if (M == 0) return;
  at::native::LayerNormTwoPassForwardCUDAKernel<float, float>
      <<<M, at::native::kCUDANumThreads, 0, stream>>>(N, eps, X, gamma, beta, Y, mean, rstd);
}
