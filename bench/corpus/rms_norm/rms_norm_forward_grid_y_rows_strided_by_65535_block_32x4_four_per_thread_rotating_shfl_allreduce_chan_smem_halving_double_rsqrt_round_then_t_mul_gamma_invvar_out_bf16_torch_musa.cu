// RMSNorm forward in the style of torch_musa (MooreThreads/torch_musa v1.1, torch_musa/csrc/aten/ops/musa/RMSNorm.mu:
// musa_rms_norm_forward_kernel_impl behind musa_rms_norm_kernel / musa_rms_norm, the MUSA backend of
// torch.nn.functional.rms_norm before the op moved to muDNN; torch_musa is Moore Threads' PyTorch backend for its
// MUSA GPUs, kernels written in CUDA's dialect), ported back to CUDA. The kernel is Apex's LayerNorm skeleton
// turned into RMSNorm:
//   input, output [n1 rows, n2 columns] contiguous, T = fp16 / bf16 / fp32, accumulation type U = float
//   (at::acc_type), optional gamma [n2] (nullptr: no weight), invvar [n1] (U) written as a second output;
//   argument order (output, invvar, input, n1, n2, epsilon, gamma), epsilon a DOUBLE;
//   launch: block (32, 4) (a warp in x, 4 warps in y), grid (1, min(n1, maxGridSize[1] = 65535), 1); each block
//   walks rows i1 = blockIdx.y, += gridDim.y; dynamic shared memory 2 * blockDim.y * sizeof(T) bytes (sized with T
//   though it holds U values: 16 bytes for 16-bit T, just the 4 floats the merge touches);
//   per row: every thread of the block (flat index thrx = threadIdx.x + threadIdx.y * 32) sums squares of FOUR
//   CONSECUTIVE values per step (l = 4 * thrx, l += 4 * 128) then a serial tail for the last n2 % 4; the warp sum is
//   an all-reduce by ROTATION (5 steps of __shfl from lane (lane + 2^l) & 31, every lane ends with the total); the
//   4 warps merge in shared memory by halving (upper warps write buf[2 * w + 1], lower ones add), thread (0, 0)
//   stores the total in buf[1], all read it back: sigma2 = buf[1] / n2;
//   c_invvar = rsqrt(sigma2 + epsilon) evaluated in DOUBLE (sigma2 promoted by the double epsilon) and stored as U;
//   output = gamma[i] * T(c_invvar * x): the normalized value ROUNDED TO T, then multiplied by gamma in T (one more
//   rounding for 16-bit types); invvar[i1] = c_invvar by thread (0, 0); a __syncthreads() ends each row.
// Fixed: the row offsets i1 * n2 were 32-bit products (int in the reduction helper, unsigned in the kernel); past
// 2^31 elements (e.g. 262144 tokens x 8192) they overflowed and the rows were read and written at wrong places out
// of bounds: 64-bit here.
// Changed: host-side warpSize and getCurrentDeviceProperties()->maxGridSize[1] are the constants 32 and 65535; the
// ATen dispatch became a templated C++ launcher with device pointers, sizes and a stream (fp16, bf16 and fp32
// instantiated); the backward kernels are not ported.
#include <stdint.h>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define WARP_SHFL(var, src_lane) __shfl_sync(0xffffffff, var, src_lane)

namespace at {
namespace musa {

namespace {

template <typename T>
struct SharedMemory;

template <>
struct SharedMemory<float> {
  __device__ float* getPointer() {
    extern __shared__ float s_float[];
    return s_float;
  }
};

template <>
struct SharedMemory<double> {
  __device__ double* getPointer() {
    extern __shared__ double s_double[];
    return s_double;
  }
};

template <typename U>
__device__ inline void RMSOnlineSum(const U curr, U& sigma2) {
  sigma2 = sigma2 + curr * curr;
}

template <typename U>
__device__ inline void ChanRMSOnlineSum(const U sigma2B, U& sigma2) {
  sigma2 = sigma2 + sigma2B;
}

// Mean of squares of row i1 into sigma2 (the name kept from the Welford original; no mean is computed).
// blockDim.x must be the warp (32); buf holds at least 2 * blockDim.y values of U.
template <typename T, typename U>
__device__ void WelfordMuSigma2(const T* __restrict__ vals, const int n1, const int n2, const int i1, U& sigma2,
                                U* buf) {
  sigma2 = U(0);
  if (i1 < n1) {
    const int numx = blockDim.x * blockDim.y;
    const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
    const T* lvals = vals + (int64_t)i1 * n2;  // 64-bit row offset (fixed)
    // four consecutive values per thread and step, then the tail serially
    int l = 4 * thrx;
    for (; l + 3 < n2; l += 4 * numx) {
      for (int k = 0; k < 4; ++k) {
        U curr = static_cast<U>(lvals[l + k]);
        RMSOnlineSum<U>(curr, sigma2);
      }
    }
    for (; l < n2; ++l) {
      U curr = static_cast<U>(lvals[l]);
      RMSOnlineSum<U>(curr, sigma2);
    }
    // warp all-reduce by rotation: after step l every lane holds the sum of 2^(l+1) consecutive lanes
    for (int l = 0; l <= 4; ++l) {
      int srcLaneB = (threadIdx.x + (1 << l)) & (warpSize - 1);
      U sigma2B = WARP_SHFL(sigma2, srcLaneB);
      ChanRMSOnlineSum<U>(sigma2B, sigma2);
    }
    // lane 0 of every warp holds its warp's sum; merge the warps
    if (blockDim.y > 1) {
      U* ubuf = (U*)buf;
      for (int offset = blockDim.y / 2; offset > 0; offset /= 2) {
        // the upper half of the warps write
        if (threadIdx.x == 0 && threadIdx.y >= offset && threadIdx.y < 2 * offset) {
          const int wrt_y = threadIdx.y - offset;
          ubuf[2 * wrt_y + 1] = sigma2;
        }
        __syncthreads();
        // the lower half add
        if (threadIdx.x == 0 && threadIdx.y < offset) {
          U sigma2B = ubuf[2 * threadIdx.y + 1];
          ChanRMSOnlineSum<U>(sigma2B, sigma2);
        }
        __syncthreads();
      }
      // thread (0, 0) holds the row's sum: broadcast it through shared memory
      if (threadIdx.x == 0 && threadIdx.y == 0) {
        ubuf[1] = sigma2;
      }
      __syncthreads();
      sigma2 = ubuf[1] / U(n2);
    } else {
      sigma2 = WARP_SHFL(sigma2 / U(n2), 0);
    }
  }
}

}  // namespace

/* kerntune:
args  = ["output: out bf16[R * D]", "invvar: out f32[R]", "input: in bf16[R * D]", "n1: i32 = R", "n2: i32 = D",
         "epsilon: f64 = 1e-6", "gamma: in bf16[D]"]
sizes = [{ R = 16384, D = 4096 }, { R = 4, D = 4096 }, { R = 1001, D = 4099 }]
grid  = [1, "min(R, 65535)"]
block = [32, 4]
smem  = 16
template_args = ["__nv_bfloat16", "float"]
*/
template <typename T, typename U>
__global__ void musa_rms_norm_forward_kernel_impl(T* __restrict__ output, U* __restrict__ invvar,
                                                  const T* __restrict__ input, const int n1, const int n2,
                                                  double epsilon, const T* __restrict__ gamma) {
  // blockDim (32, 4, 1), gridDim (1, rows or 65535, 1)
  for (auto i1 = blockIdx.y; i1 < n1; i1 += gridDim.y) {
    SharedMemory<U> shared;
    U* buf = shared.getPointer();
    U sigma2;
    WelfordMuSigma2(input, n1, n2, i1, sigma2, buf);

    const T* lvals = input + (int64_t)i1 * n2;  // 64-bit row offsets (fixed)
    T* ovals = output + (int64_t)i1 * n2;
    U c_invvar = ::rsqrt(sigma2 + epsilon);  // double rsqrt, stored as U
    const int numx = blockDim.x * blockDim.y;
    const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
    if (gamma != NULL) {
      for (int i = thrx; i < n2; i += numx) {
        U curr = static_cast<U>(lvals[i]);
        ovals[i] = gamma[i] * static_cast<T>(c_invvar * curr);
      }
    } else {
      for (int i = thrx; i < n2; i += numx) {
        U curr = static_cast<U>(lvals[i]);
        ovals[i] = static_cast<T>(c_invvar * curr);
      }
    }
    if (threadIdx.x == 0 && threadIdx.y == 0) {
      invvar[i1] = c_invvar;
    }
    __syncthreads();
  }
}

}  // namespace musa
}  // namespace at

// output, input: device [outter, inner]; invvar: device [outter] (U); gamma: device [inner] or nullptr.
template <typename T, typename U>
void musa_rms_norm_kernel(T* output, const T* input, U* invvar, const T* gamma, int inner, int outter,
                          double epsilon, cudaStream_t stream) {
  if (outter == 0 || inner == 0) return;
  // 4 warps
  dim3 threads{32, 4, 1};
  const uint64_t max_grid_Y = 65535;  // maxGridSize[1]

  // n1, n2 = N, D
  dim3 blocks(1, std::min((uint64_t)outter, max_grid_Y), 1);
  int bytes_shm_needed = threads.y > 1 ? 2 * threads.y * sizeof(T) : 0;
  at::musa::musa_rms_norm_forward_kernel_impl<<<blocks, threads, bytes_shm_needed, stream>>>(
      output, invvar, input, outter, inner, epsilon, gamma);
}

template void musa_rms_norm_kernel<__half, float>(__half*, const __half*, float*, const __half*, int, int, double,
                                                  cudaStream_t);
template void musa_rms_norm_kernel<__nv_bfloat16, float>(__nv_bfloat16*, const __nv_bfloat16*, float*,
                                                         const __nv_bfloat16*, int, int, double, cudaStream_t);
template void musa_rms_norm_kernel<float, float>(float*, const float*, float*, const float*, int, int, double,
                                                 cudaStream_t);
