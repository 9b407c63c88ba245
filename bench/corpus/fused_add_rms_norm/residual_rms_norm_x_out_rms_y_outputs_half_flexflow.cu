// The fused residual add + RMSNorm of FlexFlow Serve (SpecInfer's engine; src/ops/kernels/residual_rms_norm_kernels.cu,
// ResidualRMSNormFusedForwardKernel and forward_kernel), fp16 (half models):
//   X_out = X1 + X2                       the residual stream, a half add (operator+ of half: rounded)
//   rms[i] = T(rsqrt(sum(X_out^2) / N + eps))          stored per row, ROUNDED to half, in a device buffer
//   Y      = T(float(X_out) * float(rms[i]))           the normalized row, stored (rounded) to its own buffer
//   output = T(float(Y) * float(weights[index % N]))   the weighted row, from the rounded Y
// FlexFlow's conventions: argument order (N, eps, X1, X2, X_out, rms, Y, weights, output) with int64_t N and row
// indices, every intermediate written to global memory (the op meta's rms_ptr and norm_ptr keep rms and Y for the
// backward / PEFT passes), the sum of squares read back from the just-written X_out, a thread-0 write of rms[i]
// read back by the whole block after __syncthreads, the weight indexed as index % N; C10_WARP_SIZE and a
// WARP_SHFL_DOWN wrapper borrowed from PyTorch, BlockReduceSum (shuffle-down warp sums into a __shared__
// float[C10_WARP_SIZE], warp 0 reducing them, the result valid in thread 0); one row per block of
// min(CUDA_NUM_THREADS = 1024, in_dim) threads, launched from an op-meta struct (batch_size, in_dim, eps and the
// scratch pointers) on the Legion task's stream.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

// Use 1024 threads per block, which requires cuda sm_2x or above
int const CUDA_NUM_THREADS = 1024;

namespace FlexFlow {

// The op meta: what forward_kernel reads (FlexFlow allocates rms_ptr [batch_size] and norm_ptr
// [batch_size * in_dim] from the GPU memory allocator when the op is initialized).
struct ResidualRMSNormMeta {
  ResidualRMSNormMeta(float _eps, int _in_dim, int _batch_size, void *_rms_ptr, void *_norm_ptr)
      : eps(_eps), in_dim(_in_dim), batch_size(_batch_size), rms_ptr(_rms_ptr), norm_ptr(_norm_ptr) {}
  float eps;
  int in_dim;
  int batch_size;
  void *rms_ptr;
  void *norm_ptr;
};

namespace Kernels {
namespace ResidualRMSNorm {

#define C10_WARP_SIZE 32

template <typename T>
__device__ __forceinline__ T WARP_SHFL_DOWN(T value,
                                            unsigned int delta,
                                            int width = warpSize,
                                            unsigned int mask = 0xffffffff) {
  return __shfl_down_sync(mask, value, delta, width);
}

template <typename T>
__inline__ __device__ T WarpReduceSum(T val) {
#pragma unroll
  for (int offset = (C10_WARP_SIZE >> 1); offset > 0; offset >>= 1) {
    val += WARP_SHFL_DOWN(val, offset);
  }
  return val;
}

template <typename T>
__inline__ __device__ T BlockReduceSum(T val, T *shared) {
  int const lid = threadIdx.x % C10_WARP_SIZE;
  int const wid = threadIdx.x / C10_WARP_SIZE;
  val = WarpReduceSum(val);
  __syncthreads();
  if (lid == 0) {
    shared[wid] = val;
  }
  __syncthreads();
  val = (threadIdx.x < (blockDim.x / C10_WARP_SIZE)) ? shared[lid] : T(0);
  if (wid == 0) {
    val = WarpReduceSum(val);
  }
  return val;
}

/* kerntune:
args  = ["N: i64 = hidden", "eps: f32 = 1e-6", "X1: in f16[tokens * hidden]", "X2: in f16[tokens * hidden]",
         "X_out: out f16[tokens * hidden]", "rms: out f16[tokens]", "Y: out f16[tokens * hidden]",
         "weights: in f16[hidden]", "output: out f16[tokens * hidden]"]
sizes = [{ tokens = 4096, hidden = 4096 }, { tokens = 4, hidden = 5120 }, { tokens = 1001, hidden = 3003 }]
grid  = "tokens"
block = "min(1024, hidden)"
template_args = ["half"]
*/
template <typename T>
__global__ void ResidualRMSNormFusedForwardKernel(int64_t N,
                                                  float eps,
                                                  T const *X1,
                                                  T const *X2,
                                                  T *X_out,
                                                  T *rms,
                                                  T *Y,
                                                  T const *weights,
                                                  T *output) {
  __shared__ float v_shared[C10_WARP_SIZE];
  int64_t const i = blockIdx.x;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
    int64_t const index = i * N + j;
    X_out[index] = X1[index] + X2[index];
    sum += (static_cast<float>(X_out[index]) * static_cast<float>(X_out[index]));
  }
  sum = BlockReduceSum<float>(sum, v_shared);

  if (threadIdx.x == 0) {
    rms[i] = static_cast<T>(rsqrt((sum / static_cast<float>(N)) + eps));
  }

  __syncthreads();

  for (int64_t j = threadIdx.x; j < N; j += blockDim.x) {
    const int64_t index = i * N + j;
    Y[index] = static_cast<T>(static_cast<float>(X_out[index]) * static_cast<float>(rms[i]));
    output[index] = static_cast<T>(static_cast<float>(Y[index]) * static_cast<float>(weights[index % N]));
  }
}

// input1 / input2 / residual_output / output [batch_size, in_dim], weight [in_dim]; the meta's rms_ptr and norm_ptr
// receive rms [batch_size] and the unweighted normalized rows; device pointers.
template <typename T>
void forward_kernel(ResidualRMSNormMeta const *m,
                    T const *input1_ptr,
                    T const *input2_ptr,
                    T const *weight_ptr,
                    T *residual_output_ptr,
                    T *output_ptr,
                    cudaStream_t stream) {

  ResidualRMSNormFusedForwardKernel<T>
      <<<m->batch_size, std::min(CUDA_NUM_THREADS, m->in_dim), 0, stream>>>(
          m->in_dim,
          m->eps,
          input1_ptr,
          input2_ptr,
          residual_output_ptr,
          static_cast<T *>(m->rms_ptr),
          static_cast<T *>(m->norm_ptr),
          weight_ptr,
          output_ptr);
}

template void forward_kernel<half>(ResidualRMSNormMeta const *, half const *, half const *, half const *, half *,
                                   half *, cudaStream_t);
template void forward_kernel<float>(ResidualRMSNormMeta const *, float const *, float const *, float const *,
                                    float *, float *, cudaStream_t);

} // namespace ResidualRMSNorm
} // namespace Kernels
} // namespace FlexFlow
