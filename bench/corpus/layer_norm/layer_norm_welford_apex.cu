// LayerNorm forward (fp16 in/out, fp32 statistics) in the style of NVIDIA Apex's layer_norm_cuda_kernel.cu: a 2-D
// block of (32, 4) threads per row, rows strided over blockIdx.y with grid (1, min(n1, maxGridY)), Welford's
// online mean/variance per thread merged with Chan's formula across the warp (shuffles) and across warps (dynamic
// shared memory), and the per-row mean and inverse std written out for the backward pass.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

template <typename U>
__device__ void cuWelfordOnlineSum(const U curr, U& mu, U& m2, U& count) {
  count = count + U(1);
  const U delta = curr - mu;
  const U lmean = mu + delta / count;
  mu = lmean;
  const U delta2 = curr - lmean;
  m2 = m2 + delta * delta2;
}

template <typename U>
__device__ void cuChanOnlineSum(const U muB, const U m2B, const U countB, U& mu, U& m2, U& count) {
  const U delta = muB - mu;
  U nA = count;
  U nB = countB;
  count = count + countB;
  const U nX = count;
  if (nX > U(0)) {
    nA = nA / nX;
    nB = nB / nX;
    mu = nA * mu + nB * muB;
    m2 = m2 + m2B + delta * delta * nA * nB * nX;
  } else {
    mu = U(0);
    m2 = U(0);
  }
}

/* kerntune:
args  = ["output_vals: out f16[n1 * n2]", "mean: out f32[n1]", "invvar: out f32[n1]", "vals: in f16[n1 * n2]",
         "n1: i32 = n1", "n2: i32 = n2", "epsilon: f32 = 1e-5", "gamma: in f16[n2]", "beta: in f16[n2]"]
sizes = [{ n1 = 8192, n2 = 4096 }, { n1 = 32, n2 = 12288 }, { n1 = 1001, n2 = 4097 }]
grid  = [1, "min(n1, 65535)"]
block = [32, 4]
smem  = "48"
*/
template <typename T, typename U, typename V>
__global__ void cuApplyLayerNorm(V* __restrict__ output_vals, U* __restrict__ mean, U* __restrict__ invvar,
                                 const T* __restrict__ vals, const int n1, const int n2, const U epsilon,
                                 const V* __restrict__ gamma, const V* __restrict__ beta) {
  // blockDim.x == 32 (one warp per threadIdx.y)
  extern __shared__ float s_float[];
  U* s_mu = reinterpret_cast<U*>(s_float);
  U* s_m2 = s_mu + blockDim.y;
  U* s_count = s_m2 + blockDim.y;
  const int numx = blockDim.x * blockDim.y;
  const int thrx = threadIdx.x + threadIdx.y * blockDim.x;

  for (int i1 = blockIdx.y; i1 < n1; i1 += gridDim.y) {
    const T* lvals = vals + (size_t)i1 * n2;
    V* ovals = output_vals + (size_t)i1 * n2;
    U mu = U(0), m2 = U(0), count = U(0);
    for (int i = thrx; i < n2; i += numx) cuWelfordOnlineSum<U>(static_cast<U>(lvals[i]), mu, m2, count);
    // butterfly within the warp: every lane ends with the warp's statistics
    for (int l = 0; l < 5; ++l) {
      const U muB = __shfl_xor_sync(0xffffffff, mu, 1 << l);
      const U m2B = __shfl_xor_sync(0xffffffff, m2, 1 << l);
      const U countB = __shfl_xor_sync(0xffffffff, count, 1 << l);
      cuChanOnlineSum<U>(muB, m2B, countB, mu, m2, count);
    }
    if (blockDim.y > 1) {
      if (threadIdx.x == 0) {
        s_mu[threadIdx.y] = mu;
        s_m2[threadIdx.y] = m2;
        s_count[threadIdx.y] = count;
      }
      __syncthreads();
      mu = s_mu[0];
      m2 = s_m2[0];
      count = s_count[0];
      for (int y = 1; y < blockDim.y; ++y) cuChanOnlineSum<U>(s_mu[y], s_m2[y], s_count[y], mu, m2, count);
      __syncthreads();  // the buffer is rewritten for the next row
    }
    const U sigma2 = m2 / U(n2);
    const U c_invvar = rsqrtf(sigma2 + epsilon);
    for (int i = thrx; i < n2; i += numx) {
      const U curr = static_cast<U>(lvals[i]);
      ovals[i] = static_cast<V>(static_cast<U>(gamma[i]) * c_invvar * (curr - mu) + static_cast<U>(beta[i]));
    }
    if (threadIdx.x == 0 && threadIdx.y == 0) {
      mean[i1] = mu;
      invvar[i1] = c_invvar;
    }
  }
}

template <typename T, typename U, typename V>
void HostApplyLayerNorm(V* output, U* mean, U* invvar, const T* input, int n1, int n2, double epsilon,
                        const V* gamma, const V* beta, cudaStream_t stream) {
  const dim3 threads(32, 4, 1);
  const uint64_t maxGridY = 65535;  // cudaDeviceProp::maxGridSize[1]
  const dim3 blocks(1, std::min((uint64_t)n1, maxGridY), 1);
  const int nshared = threads.y > 1 ? threads.y * 3 * sizeof(U) : 0;
  cuApplyLayerNorm<<<blocks, threads, nshared, stream>>>(output, mean, invvar, input, n1, n2, U(epsilon), gamma,
                                                         beta);
}

void cuda_layer_norm(__half* output, float* mean, float* invvar, const __half* input, int n1, int n2,
                     const __half* gamma, const __half* beta, double epsilon, cudaStream_t stream) {
  HostApplyLayerNorm<__half, float, __half>(output, mean, invvar, input, n1, n2, epsilon, gamma, beta, stream);
}
