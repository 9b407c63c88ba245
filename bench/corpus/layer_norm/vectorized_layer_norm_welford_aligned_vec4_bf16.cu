// LayerNorm forward as PyTorch ATen's vectorized path writes it (layer_norm_kernel.cu, vectorized_layer_norm_kernel,
// taken when N is a multiple of the vector size and the pointers are aligned): one fused kernel per row instead of
// the RowwiseMoments + LayerNormForward pair.
//   X, gamma, beta, Y bf16; mean, rstd fp32 [M] (saved for the backward); argument order (N, eps, X, gamma, beta,
//   mean, rstd, Y), N first as ATen passes it; gamma and beta nullable (elementwise_affine = False)
//   statistics: Welford per thread over aligned_vector<T, 4> loads (cuWelfordOnlineSum: the running mean updated
//               by delta / count), merged across the warp by __shfl_down (cuWelfordCombine, Chan's formula with
//               count-weighted means), then across warps by a halving tree in dynamic shared memory (upper half
//               writes {mean, sigma2} pairs and counts, lower half merges), var = M2 / N (biased)
//   rstd = rsqrt(var + eps);  Y = T(gamma * (rstd * (x - mean)) + beta)   (fp32, one rounding)
// Launch as ATen: block (warp_size, num_threads() / warp_size) = (32, 4), one row per block, grid M, dynamic smem
// threads.y * 3 / 2 floats (the {mean, sigma2} pairs and counts of the upper half).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace at {
namespace native {
namespace {

constexpr int kWarpSize = 32;
constexpr int vec_size = 4;  // vectorize only this many elements

constexpr int num_threads() { return kWarpSize * 4; }

template <typename scalar_t, int N>
struct alignas(sizeof(scalar_t) * N) aligned_vector {
  scalar_t val[N];
};

struct WelfordDataLN {
  float mean;
  float sigma2;
  float count;
  __device__ WelfordDataLN() : mean(0.f), sigma2(0.f), count(0.f) {}
  __device__ WelfordDataLN(float m, float s, float c) : mean(m), sigma2(s), count(c) {}
};

template <typename U>
__device__ WelfordDataLN cuWelfordOnlineSum(const U val, const WelfordDataLN& curr_sum) {
  const U delta = val - curr_sum.mean;
  const U new_count = curr_sum.count + 1.f;
  const U new_mean = curr_sum.mean + delta * (1.f / new_count);  // the reciprocal, as ATen does
  return {new_mean, curr_sum.sigma2 + delta * (val - new_mean), new_count};
}

__device__ WelfordDataLN cuWelfordCombine(const WelfordDataLN dataB, const WelfordDataLN dataA) {
  using U = decltype(dataB.count);
  const U delta = dataB.mean - dataA.mean;
  const U count = dataA.count + dataB.count;
  U mean, sigma2;
  if (count > U(0)) {
    const auto coef = 1.f / count;
    const auto nA = dataA.count * coef;
    const auto nB = dataB.count * coef;
    mean = nA * dataA.mean + nB * dataB.mean;
    sigma2 = dataA.sigma2 + dataB.sigma2 + delta * delta * dataA.count * nB;
  } else {
    mean = U(0);
    sigma2 = U(0);
  }
  return {mean, sigma2, count};
}

template <typename T, typename T_ACC>
__device__ WelfordDataLN compute_stats(const T* __restrict__ X, const int N, float* buf) {
  using vec_t = aligned_vector<T, vec_size>;
  const vec_t* X_vec = reinterpret_cast<const vec_t*>(X);
  const int numx = blockDim.x * blockDim.y;
  const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
  const int n_vec_to_read = N / vec_size;
  WelfordDataLN wd(0.f, 0.f, 0.f);
  // no tail, N is a multiple of vec_size
  for (int i = thrx; i < n_vec_to_read; i += numx) {
    const vec_t data = X_vec[i];
#pragma unroll
    for (int ii = 0; ii < vec_size; ii++) {
      wd = cuWelfordOnlineSum(static_cast<T_ACC>(data.val[ii]), wd);
    }
  }
  // within the warp
  for (int offset = (kWarpSize >> 1); offset > 0; offset >>= 1) {
    WelfordDataLN wdB{__shfl_down_sync(0xffffffff, wd.mean, offset), __shfl_down_sync(0xffffffff, wd.sigma2, offset),
                      __shfl_down_sync(0xffffffff, wd.count, offset)};
    wd = cuWelfordCombine(wd, wdB);
  }
  // lane 0 of each warp holds the warp's statistics; across the warps
  if (blockDim.y > 1) {
    float* meansigmabuf = buf;
    float* countbuf = buf + blockDim.y;
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
    return WelfordDataLN{meansigmabuf[0], meansigmabuf[1], 0.f};
  } else {
    return WelfordDataLN{__shfl_sync(0xffffffff, wd.mean, 0), __shfl_sync(0xffffffff, wd.sigma2, 0) / float(N), 0.f};
  }
}

}  // namespace

/* kerntune:
args  = ["N: i32 = N", "eps: f32 = 1e-5", "X: in bf16[M * N]", "gamma: in bf16[N]", "beta: in bf16[N]",
         "mean: out f32[M]", "rstd: out f32[M]", "Y: out bf16[M * N]"]
sizes = [{ M = 16384, N = 4096 }, { M = 4, N = 5120 }, { M = 999, N = 1284 }]
grid  = "M"
block = [32, 4]
smem  = 24
template_args = ["__nv_bfloat16", "float"]
*/
template <typename T, typename T_ACC>
__global__ void vectorized_layer_norm_kernel(const int N, T_ACC eps, const T* __restrict__ X, const T* gamma,
                                             const T* beta, T_ACC* mean, T_ACC* rstd, T* Y) {
  extern __shared__ float s_data[];  // separate floats, not WelfordDataLN structs, to avoid bank conflicts
  const int64_t i1 = blockIdx.x;
  const T* block_row = X + i1 * N;
  WelfordDataLN wd = compute_stats<T, T_ACC>(block_row, N, s_data);

  using vec_t = aligned_vector<T, vec_size>;
  const vec_t* X_vec = reinterpret_cast<const vec_t*>(block_row);
  const vec_t* gamma_vec = (gamma != nullptr) ? reinterpret_cast<const vec_t*>(gamma) : nullptr;
  const vec_t* beta_vec = (beta != nullptr) ? reinterpret_cast<const vec_t*>(beta) : nullptr;
  vec_t* Y_vec = reinterpret_cast<vec_t*>(Y + i1 * N);

  const int numx = blockDim.x * blockDim.y;
  const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
  const int n_vec_to_read = N / vec_size;

  const T_ACC rstd_val = rsqrtf(wd.sigma2 + eps);

  // no tail: N is a multiple of vec_size
  for (int i = thrx; i < n_vec_to_read; i += numx) {
    const vec_t data = X_vec[i];
    vec_t out;
    if (gamma_vec != nullptr && beta_vec != nullptr) {
#pragma unroll
      for (int ii = 0; ii < vec_size; ii++) {
        out.val[ii] = static_cast<T>(static_cast<T_ACC>(gamma_vec[i].val[ii]) *
                                         (rstd_val * (static_cast<T_ACC>(data.val[ii]) - wd.mean)) +
                                     static_cast<T_ACC>(beta_vec[i].val[ii]));
      }
    } else if (gamma_vec != nullptr) {
#pragma unroll
      for (int ii = 0; ii < vec_size; ii++) {
        out.val[ii] = static_cast<T>(static_cast<T_ACC>(gamma_vec[i].val[ii]) *
                                     (rstd_val * (static_cast<T_ACC>(data.val[ii]) - wd.mean)));
      }
    } else if (beta_vec != nullptr) {
#pragma unroll
      for (int ii = 0; ii < vec_size; ii++) {
        out.val[ii] = static_cast<T>((rstd_val * (static_cast<T_ACC>(data.val[ii]) - wd.mean)) +
                                     static_cast<T_ACC>(beta_vec[i].val[ii]));
      }
    } else {
#pragma unroll
      for (int ii = 0; ii < vec_size; ii++) {
        out.val[ii] = static_cast<T>(rstd_val * (static_cast<T_ACC>(data.val[ii]) - wd.mean));
      }
    }
    Y_vec[i] = out;
  }
  if (thrx == 0) {
    mean[i1] = wd.mean;
    rstd[i1] = rstd_val;
  }
}

// The vectorized launch of LayerNormKernelImplInternal: device pointers; N % vec_size == 0 and 8-byte aligned
// rows (ATen falls back to RowwiseMoments + LayerNormForward otherwise, not part of this file).
template <typename T, typename T_ACC>
void launch_vectorized_layer_norm_kernel(int N, int64_t M, T_ACC eps, const T* X, const T* gamma, const T* beta,
                                         T* Y, T_ACC* mean, T_ACC* rstd, cudaStream_t stream) {
  if (M == 0 || N % vec_size != 0) return;
  const int warp_size = kWarpSize;
  const dim3 threads(warp_size, num_threads() / warp_size, 1);
  const dim3 blocks(static_cast<unsigned>(M));
  // threads.y is a power of two (or 1): the cross-warp tree halves it
  const int nshared = threads.y > 1 ? threads.y * 3 / 2 * sizeof(T_ACC) : 0;
  vectorized_layer_norm_kernel<<<blocks, threads, nshared, stream>>>(N, eps, X, gamma, beta, mean, rstd, Y);
}

template void launch_vectorized_layer_norm_kernel<__nv_bfloat16, float>(int, int64_t, float, const __nv_bfloat16*,
                                                                        const __nv_bfloat16*, const __nv_bfloat16*,
                                                                        __nv_bfloat16*, float*, float*,
                                                                        cudaStream_t);

}  // namespace native
}  // namespace at
