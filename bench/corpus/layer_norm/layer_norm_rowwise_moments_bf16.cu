// LayerNorm forward (bf16 in/out, fp32 mean and rstd outputs) in the style of PyTorch ATen's layer_norm_kernel.cu:
// the row length N first in the argument list, a kernel template over the input and the accumulation type, one
// row per block of (32, 4) threads, Welford statistics reduced with __shfl_down to lane 0 and then across warps by
// a halving tree in dynamic shared memory, then a second pass over the row writing Y. Kept scalar (ATen
// vectorizes when the row is aligned).
#include <cuda_runtime.h>
#include <cuda_bf16.h>

namespace native {

struct WelfordDataLN {
  float mean;
  float sigma2;
  float count;
};

template <typename U>
__device__ WelfordDataLN cuWelfordOnlineSum(const U val, const WelfordDataLN& curr_sum) {
  const U delta = val - curr_sum.mean;
  const U new_count = curr_sum.count + 1.f;
  const U new_mean = curr_sum.mean + delta * (1.f / new_count);
  return {new_mean, curr_sum.sigma2 + delta * (val - new_mean), new_count};
}

__device__ WelfordDataLN cuWelfordCombine(const WelfordDataLN dataB, const WelfordDataLN dataA) {
  const float delta = dataB.mean - dataA.mean;
  const float count = dataA.count + dataB.count;
  float mean, sigma2;
  if (count != 0) {
    const float coef = 1.f / count;
    const float nA = dataA.count * coef;
    const float nB = dataB.count * coef;
    mean = nA * dataA.mean + nB * dataB.mean;
    sigma2 = dataA.sigma2 + dataB.sigma2 + delta * delta * dataA.count * nB;
  } else {
    mean = 0.f;
    sigma2 = 0.f;
  }
  return {mean, sigma2, count};
}

/* kerntune:
args  = ["N: i32 = N", "eps: f32 = 1e-5", "X: in bf16[M * N]", "gamma: in bf16[N]", "beta: in bf16[N]",
         "mean: out f32[M]", "rstd: out f32[M]", "Y: out bf16[M * N]"]
sizes = [{ M = 8192, N = 5120 }, { M = 48, N = 8192 }, { M = 1003, N = 4101 }]
grid  = "M"
block = [32, 4]
smem  = "48"
*/
template <typename T, typename T_ACC>
__global__ void layer_norm_rowwise_kernel(const int N, T_ACC eps, const T* __restrict__ X,
                                          const T* __restrict__ gamma, const T* __restrict__ beta,
                                          T_ACC* __restrict__ mean, T_ACC* __restrict__ rstd, T* __restrict__ Y) {
  extern __shared__ float s_data[];
  const int64_t i1 = blockIdx.x;
  const T* block_row = X + i1 * N;
  const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
  const int numx = blockDim.x * blockDim.y;

  WelfordDataLN wd{0.f, 0.f, 0.f};
  for (int i = thrx; i < N; i += numx) wd = cuWelfordOnlineSum(static_cast<T_ACC>(block_row[i]), wd);

  // intra-warp reduction: lane 0 ends with the warp's statistics
  for (int offset = 16; offset > 0; offset >>= 1) {
    WelfordDataLN wdB{__shfl_down_sync(0xffffffff, wd.mean, offset),
                      __shfl_down_sync(0xffffffff, wd.sigma2, offset),
                      __shfl_down_sync(0xffffffff, wd.count, offset)};
    wd = cuWelfordCombine(wd, wdB);
  }
  // inter-warp reduction: the upper half of the warps hands its values to the lower half
  float* meansigmabuf = s_data;
  float* countbuf = s_data + 2 * blockDim.y;
  for (int offset = blockDim.y / 2; offset > 0; offset /= 2) {
    if (threadIdx.x == 0 && threadIdx.y >= offset && threadIdx.y < 2 * offset) {
      const int wrt_y = threadIdx.y - offset;
      meansigmabuf[2 * wrt_y] = wd.mean;
      meansigmabuf[2 * wrt_y + 1] = wd.sigma2;
      countbuf[wrt_y] = wd.count;
    }
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y < offset) {
      WelfordDataLN wdB{meansigmabuf[2 * threadIdx.y], meansigmabuf[2 * threadIdx.y + 1], countbuf[threadIdx.y]};
      wd = cuWelfordCombine(wd, wdB);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    meansigmabuf[0] = wd.mean;
    meansigmabuf[1] = wd.sigma2 / float(N);
  }
  __syncthreads();
  const T_ACC m = meansigmabuf[0];
  const T_ACC r = rsqrtf(meansigmabuf[1] + eps);
  if (thrx == 0) {
    mean[i1] = m;
    rstd[i1] = r;
  }

  T* out_row = Y + i1 * N;
  for (int i = thrx; i < N; i += numx) {
    const T_ACC v = static_cast<T_ACC>(block_row[i]);
    out_row[i] = static_cast<T>((v - m) * r * static_cast<T_ACC>(gamma[i]) + static_cast<T_ACC>(beta[i]));
  }
}

}  // namespace native

void LayerNormKernelImpl(const __nv_bfloat16* X, const __nv_bfloat16* gamma, const __nv_bfloat16* beta, int64_t M,
                         int64_t N, float eps, __nv_bfloat16* Y, float* mean, float* rstd, cudaStream_t stream) {
  const dim3 threads(32, 4, 1);
  const dim3 blocks(M);
  const int nshared = threads.y * 3 * sizeof(float);
  native::layer_norm_rowwise_kernel<__nv_bfloat16, float><<<blocks, threads, nshared, stream>>>(
      N, eps, X, gamma, beta, mean, rstd, Y);
}
