// LayerNorm as the TensorRT cookbook writes its plugin kernels (NVIDIA/trt-samples-for-hackathon-cn,
// cookbook/91-OldStuff/LayerNormPlugin-TRT8/LayerNormPluginCUB.cu, LayerNormLargeKernelV4 chosen by
// computeLayerNormV4 for hidden sizes other than <= 32, 256 and 1024). T = __half storage, OP_T = float math
// (the <__half, float, 256> instance). One block of TPB = 256 threads per row (gridSize = rows), argument order
// (nHiddenDimension, input, gamma, beta, output, epsilon). ONE PASS: each thread strides the row by TPB, scales x by
// denominator = 1 / n and accumulates a cub::KeyValuePair<float, float> (x / n, x * x / n) with a hand-written
// mySum functor, and meanwhile COPIES x into output (a staging store); cub::BlockReduce<kvp, 256> sums the pairs,
// thread 0 writes mu = E[x] and rsigma = rsqrt(E[x^2] - mu^2 + eps) to __shared__, and the second loop RE-READS the
// staged row from output and overwrites it with (x - mu) * rsigma * gamma + beta, rounded once to half.
// Fixed: the one-pass variance E[x^2] - mu^2 can come out slightly negative for rows with a large mean, and with a
// small eps rsqrt then returns NaN; the variance is clamped at 0 before eps is added. The row offset
// blockIdx.x * nHiddenDimension is formed in 64 bits (int in the original). Changed: the TensorRT plugin
// (enqueue, PluginTensorDesc) is replaced by the plain computeLayerNormV4 entry with device pointers and a stream,
// and only its "large" branch is kept: the <= 32 (one warp) and the 256 / 1024 vectorized branches are left out, so
// every hidden size takes this kernel; CHECK reads cudaGetLastError (cudaPeekAtLastError in the original).
// Sizes: 16384 x 4096, decode 4 x 5120, 999 x 1001 (odd hidden: 233 threads take 4 columns, the rest 3).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/cub.cuh>
#include <cstdint>
#include <cstdio>

#define CHECK(call)                                                                       \
  do {                                                                                    \
    cudaError_t status_ = call;                                                           \
    if (status_ != cudaSuccess) {                                                         \
      fprintf(stderr, "CUDA error %d at %s:%d\n", (int)status_, __FILE__, __LINE__);      \
      return -1;                                                                          \
    }                                                                                     \
  } while (0)

template <typename T>
using kvp = cub::KeyValuePair<T, T>;

template <typename T>
struct mySum {
  __host__ __device__ __forceinline__ kvp<T> operator()(const kvp<T>& a, const kvp<T>& b) const {
    return kvp<T>(a.key + b.key, a.value + b.value);
  }
};

/* kerntune:
args  = ["nHiddenDimension: i32 = hidden", "input: in f16[rows * hidden]", "gamma: in f16[hidden]",
         "beta: in f16[hidden]", "output: out f16[rows * hidden]", "epsilon: f32 = 1e-5"]
sizes = [{ rows = 16384, hidden = 4096 }, { rows = 4, hidden = 5120 }, { rows = 999, hidden = 1001 }]
grid  = "rows"
block = 256
template_args = ["__half", "float", "256"]
*/
template <typename T, typename OP_T, int TPB>
__global__ void LayerNormLargeKernelV4(const int nHiddenDimension, const T* input, const T* gamma, const T* beta,
                                       T* output, const float epsilon) {
  const int64_t offset = (int64_t)blockIdx.x * nHiddenDimension;
  const OP_T denominator = OP_T(1) / OP_T(nHiddenDimension);
  kvp<OP_T> threadData(0, 0);

  for (int i = threadIdx.x; i < nHiddenDimension; i += TPB) {
    const int64_t index = offset + i;
    OP_T val = (OP_T)input[index];
    const OP_T tmp = val * denominator;
    threadData = mySum<OP_T>()(threadData, kvp<OP_T>(tmp, tmp * val));
    output[index] = (T)val;  // stage the row in the output buffer
  }

  using BlockReduce = cub::BlockReduce<kvp<OP_T>, TPB>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ OP_T mu, rsigma;

  const auto sumKV = BlockReduce(temp).Reduce(threadData, mySum<OP_T>());

  if (threadIdx.x == 0) {
    mu = sumKV.key;
    const OP_T var = sumKV.value - mu * mu;
    rsigma = rsqrt((var > (OP_T)0 ? var : (OP_T)0) + (OP_T)epsilon);
  }
  __syncthreads();

  for (int i = threadIdx.x; i < nHiddenDimension; i += TPB) {
    const int64_t index = offset + i;
    output[index] = (T)(((OP_T)output[index] - mu) * rsigma * (OP_T)gamma[i] + (OP_T)beta[i]);
  }
}

// gridSize = number of rows; input / output [gridSize, nHiddenDimension], gamma / beta [nHiddenDimension].
template <typename T>
int computeLayerNormV4(const int gridSize, const int nHiddenDimension, const T* input, const T* gamma, const T* beta,
                       T* output, const float epsilon, cudaStream_t stream) {
  constexpr int TPB = 256;
  (LayerNormLargeKernelV4<T, float, TPB>)<<<gridSize, TPB, 0, stream>>>(nHiddenDimension, input, gamma, beta, output,
                                                                         epsilon);
  CHECK(cudaGetLastError());
  return 0;
}

template int computeLayerNormV4<__half>(const int, const int, const __half*, const __half*, const __half*, __half*,
                                        const float, cudaStream_t);
