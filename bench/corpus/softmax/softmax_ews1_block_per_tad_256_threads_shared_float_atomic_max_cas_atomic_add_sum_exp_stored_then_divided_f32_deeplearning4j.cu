// Row softmax as Eclipse Deeplearning4j's libnd4j writes it for a contiguous (ews == 1) array along the last
// dimension (libnd4j/include/ops/declarable/helpers/cuda/activations.cu, softmaxEws1Kernel<T> behind
// softMaxEws1CudaLauncher<T> and sd::ops::helpers::softmax): one block per TAD (tensor-along-dimension, here a row
// of tadLen floats), the launch from getSoftmaxDims(numTads) = (numTads blocks, 256 threads, 1024 bytes of dynamic
// shared memory that the kernel never uses). The row max and the row sum live in two __shared__ scalars updated by
// every thread with shared-memory atomics: the max through libnd4j's sd_atomicMax for floats (an atomicCAS loop on
// the bit pattern), seeded with -DataTypeUtils::max<T>() (-FLT_MAX); the sum by atomicAdd. exp(x - max) is written
// to the output in the second pass and the output divided by the sum in place in the third.
// Changed from libnd4j: (1) its first two loops stride by gridDim.x instead of blockDim.x (threads of a block of
// 256 re-read overlapping elements whenever the grid is not 256 blocks, counting them several times in the sum, or
// skip elements when it is larger); the loops stride by blockDim.x here. (2) The TAD offset tables
// (packX->specialOffsets(), i * tadLen for a c-ordered array) are computed in the kernel as blockIdx.x * tadLen.
// (3) SD_KERNEL (= __global__) is written out; the GRID_SIZE_SOFTMAX / BLOCK_SIZE_SOFTMAX environment overrides of
// getSoftmaxDims are left out. The debug printf calls of the original are dropped.
// Tolerance: probabilities over thousands of classes are ~1e-4 and below, so atol is 1e-6 (the relative tolerance
// stays at the f32 default); the atomic sum adds in a different order every run.
#include <cuda_runtime.h>
#include <cfloat>
#include <cstdint>

namespace sd {
typedef int64_t LongType;

namespace math {
namespace atomics {
// libnd4j's float atomicMax: a compare-and-swap loop over the bit pattern
__device__ inline float sd_atomicMax(float* address, float val) {
  int* address_as_int = reinterpret_cast<int*>(address);
  int old = *address_as_int, assumed;
  do {
    assumed = old;
    old = atomicCAS(address_as_int, assumed, __float_as_int(fmaxf(val, __int_as_float(assumed))));
  } while (assumed != old);
  return __int_as_float(old);
}
__device__ inline float sd_atomicAdd(float* address, float val) { return atomicAdd(address, val); }
}  // namespace atomics

template <typename X, typename Z>
__device__ inline Z sd_exp(X val) {
  return static_cast<Z>(expf(static_cast<float>(val)));
}
}  // namespace math

namespace ops {
namespace helpers {

/* kerntune:
args  = ["input: in f32[numTads * tadLen]", "output: out f32[numTads * tadLen]",
         "numOfSubArrs: i64 = numTads", "tadLen: i64 = tadLen"]
sizes = [{ numTads = 8192, tadLen = 4096 }, { numTads = 4, tadLen = 32000 }, { numTads = 999, tadLen = 1001 }]
grid  = "numTads"
block = 256
smem  = 1024
atol  = 1e-6
template_args = ["float"]
*/
template <typename T>
__global__ void softmaxEws1Kernel(const T* input, T* output, LongType numOfSubArrs, LongType tadLen) {
  int i = blockIdx.x;  // Each block handles one TAD

  if (i >= numOfSubArrs) return;  // Out-of-bounds check for TADs

  auto inBuff = input + i * tadLen;
  auto outBuff = output + i * tadLen;

  __shared__ T shmemMax;
  __shared__ T shmemSum;

  if (threadIdx.x == 0) {
    shmemMax = -FLT_MAX;  // -DataTypeUtils::max<T>()
    shmemSum = 0.f;
  }
  __syncthreads();

  // Calculate max
  for (LongType j = threadIdx.x; j < tadLen; j += blockDim.x) {
    sd::math::atomics::sd_atomicMax(&shmemMax, inBuff[j]);
  }
  __syncthreads();

  // Calculate exp(x - max) and sum
  for (LongType j = threadIdx.x; j < tadLen; j += blockDim.x) {
    T temp = sd::math::sd_exp<T, T>(inBuff[j] - shmemMax);
    outBuff[j] = temp;
    sd::math::atomics::sd_atomicAdd(&shmemSum, temp);
  }
  __syncthreads();

  // Final division step
  for (LongType j = threadIdx.x; j < tadLen; j += blockDim.x) {
    outBuff[j] /= shmemSum;
  }
}

// getSoftmaxDims(numTads): x = blocks, y = threads, z = shared memory bytes
static dim3 getSoftmaxDims(int numTads) {
  int threadsPerBlock = 256;
  int blocksPerGrid = numTads;
  int sharedMem = 1024;
  return dim3(blocksPerGrid, threadsPerBlock, sharedMem);
}

template <typename T>
static void softMaxEws1CudaLauncher(const int blocksPerGrid, const int threadsPerBlock, const int sharedMem,
                                    const cudaStream_t* stream, const void* vx, void* vz, LongType numTads,
                                    LongType tadLength) {
  auto reCastInputs = reinterpret_cast<const T*>(vx);
  auto reCastOutputs = reinterpret_cast<T*>(vz);
  softmaxEws1Kernel<T><<<blocksPerGrid, threadsPerBlock, sharedMem, *stream>>>(reCastInputs, reCastOutputs, numTads,
                                                                                tadLength);
}

// input, output: device buffers of numTads rows of tadLength floats (softmax along the last dimension).
void softmaxEws1(const void* input, void* output, LongType numTads, LongType tadLength, cudaStream_t stream) {
  dim3 softmaxDims = getSoftmaxDims(static_cast<int>(numTads));
  softMaxEws1CudaLauncher<float>(softmaxDims.x, softmaxDims.y, softmaxDims.z, &stream, input, output, numTads,
                                 tadLength);
}

}  // namespace helpers
}  // namespace ops
}  // namespace sd
