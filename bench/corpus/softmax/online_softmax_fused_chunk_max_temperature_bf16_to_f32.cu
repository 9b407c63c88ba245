// Sampling softmax as FlashInfer's sampling.cuh computes it in its fused single-kernel path (OnlineSoftmax,
// OnlineSoftmaxFusedKernel, the path taken for large batches): bf16 logits [batch_size, d] to fp32 probabilities,
// temperature scaling by multiplication with inv_temp = 1 / (temperature_arr ? temperature_arr[row] :
// temperature_val) (a nullable per-request fp32 array, else one value for the batch).
// The online normalizer works a CHUNK at a time, the chunk being BLOCK_THREADS * VEC_SIZE columns: every thread
// loads one vec_t of VEC_SIZE logits (filled with -inf past d), the block's max of the chunk by
// cub::BlockReduce(Max) published by thread 0 through shared memory, the chunk's sum of __expf(x - chunk_max) by
// cub::BlockReduce(Sum), and thread 0 alone folds (chunk_max, chunk_sum) into the running (max, denominator)
// with denominator * __expf(old_max - new_max) + chunk_sum * __expf(chunk_max - new_max), published again; a
// second pass re-reads the logits and writes __expf(x * inv_temp - max) * (1 / denominator).
// FlashInfer's dispatch: BLOCK_THREADS = 1024 on sm_80 and newer, VEC_SIZE = gcd(16 / max(sizeof(in),
// sizeof(out)), d) (4 for these vocabularies, which are multiples of 4; a vocabulary of odd size would take 1).
// The launcher here is that fused path for every batch (FlashInfer sends <= 128 rows of >= 24576 columns to a
// two-kernel vocabulary-splitting path with a workspace, not part of this file).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cub/cub.cuh>
#include <cuda/functional>
#include <cmath>
#include <cstdint>
#include <numeric>

namespace flashinfer {
namespace sampling {

template <typename T, size_t N>
struct alignas(sizeof(T) * N) vec_t {
  T data[N];
  __device__ __forceinline__ T& operator[](size_t i) { return data[i]; }
  __device__ __forceinline__ const T& operator[](size_t i) const { return data[i]; }
  __device__ __forceinline__ void fill(T val) {
#pragma unroll
    for (size_t i = 0; i < N; ++i) data[i] = val;
  }
  __device__ __forceinline__ void load(const T* ptr) { *this = *reinterpret_cast<const vec_t<T, N>*>(ptr); }
  __device__ __forceinline__ void store(T* ptr) const { *reinterpret_cast<vec_t<T, N>*>(ptr) = *this; }
};

__host__ __device__ constexpr uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

template <uint32_t BLOCK_THREADS>
struct OnlineSoftmaxTempStorage {
  union {
    typename cub::BlockReduce<float, BLOCK_THREADS>::TempStorage reduce;
  } block_prim;
  struct {
    float max_val;
    float denominator;
  } shared_state;
};

// Probabilities of ~1 / d: an absolute tolerance far below them (the default rtol of fp32 applies).
/* kerntune:
args  = ["logits: in bf16[batch_size * d]", "output: out f32[batch_size * d]",
         "temperature_arr: in f32[batch_size] ~ uniform(0.5, 1.5)", "temperature_val: f32 = 1.0", "d: u32 = d"]
sizes = [{ batch_size = 256, d = 151936 }, { batch_size = 4, d = 128256 }, { batch_size = 37, d = 32004 }]
grid  = "batch_size"
block = 1024
atol  = 1e-9
template_args = ["1024", "4", "__nv_bfloat16", "float"]
*/
template <uint32_t BLOCK_THREADS, uint32_t VEC_SIZE, typename DTypeIn, typename DTypeOut>
__global__ void OnlineSoftmaxFusedKernel(DTypeIn* logits, DTypeOut* output, float* temperature_arr,
                                         float temperature_val, uint32_t d) {
  const uint32_t bx = blockIdx.x, tx = threadIdx.x;
  const float temperature = temperature_arr == nullptr ? temperature_val : temperature_arr[bx];
  const float inv_temp = 1.f / temperature;

  using TempStorage = OnlineSoftmaxTempStorage<BLOCK_THREADS>;
  __shared__ TempStorage temp_storage;

  vec_t<DTypeIn, VEC_SIZE> logits_vec;
  float running_max = -INFINITY;
  float running_denominator = 0.0f;

  // pass 1: running max and denominator, one chunk of BLOCK_THREADS * VEC_SIZE columns at a time
  for (uint32_t i = 0; i < ceil_div(d, BLOCK_THREADS * VEC_SIZE); ++i) {
    logits_vec.fill(DTypeIn(-INFINITY));
    if ((i * BLOCK_THREADS + tx) * VEC_SIZE < d) {
      logits_vec.load(logits + static_cast<size_t>(bx) * d + (i * BLOCK_THREADS + tx) * VEC_SIZE);
    }

    float scaled[VEC_SIZE];
    float thread_max = -INFINITY;
#pragma unroll
    for (uint32_t j = 0; j < VEC_SIZE; ++j) {
      scaled[j] = static_cast<float>(logits_vec[j]) * inv_temp;
      thread_max = fmaxf(thread_max, scaled[j]);
    }

    float block_max = cub::BlockReduce<float, BLOCK_THREADS>(temp_storage.block_prim.reduce)
                          .Reduce(thread_max, cuda::maximum<>{});
    if (tx == 0) temp_storage.shared_state.max_val = block_max;
    __syncthreads();
    block_max = temp_storage.shared_state.max_val;

    float thread_sum = 0.0f;
#pragma unroll
    for (uint32_t j = 0; j < VEC_SIZE; ++j) {
      thread_sum += __expf(scaled[j] - block_max);  // -inf lanes add 0
    }
    float block_sum = cub::BlockReduce<float, BLOCK_THREADS>(temp_storage.block_prim.reduce).Sum(thread_sum);
    __syncthreads();  // temp storage reused below and in the next chunk

    if (tx == 0) {
      const float new_max = fmaxf(running_max, block_max);
      running_denominator =
          running_denominator * __expf(running_max - new_max) + block_sum * __expf(block_max - new_max);
      running_max = new_max;
      temp_storage.shared_state.max_val = running_max;
      temp_storage.shared_state.denominator = running_denominator;
    }
    __syncthreads();
    running_max = temp_storage.shared_state.max_val;
    running_denominator = temp_storage.shared_state.denominator;
  }

  const float final_max = running_max;
  const float inv_denominator = 1.0f / running_denominator;

  // pass 2: normalize
  vec_t<DTypeOut, VEC_SIZE> prob_vec;
  for (uint32_t i = 0; i < ceil_div(d, BLOCK_THREADS * VEC_SIZE); ++i) {
    const bool in_bounds = (i * BLOCK_THREADS + tx) * VEC_SIZE < d;
    if (in_bounds) {
      logits_vec.load(logits + static_cast<size_t>(bx) * d + (i * BLOCK_THREADS + tx) * VEC_SIZE);
#pragma unroll
      for (uint32_t j = 0; j < VEC_SIZE; ++j) {
        const float s = static_cast<float>(logits_vec[j]) * inv_temp;
        prob_vec[j] = static_cast<DTypeOut>(__expf(s - final_max) * inv_denominator);
      }
      prob_vec.store(output + static_cast<size_t>(bx) * d + (i * BLOCK_THREADS + tx) * VEC_SIZE);
    }
  }
}

#define DISPATCH_ALIGNED_VEC_SIZE(aligned_vec_size, ALIGNED_VEC_SIZE, ...) \
  switch (aligned_vec_size) {                                              \
    case 4: {                                                              \
      constexpr uint32_t ALIGNED_VEC_SIZE = 4;                             \
      __VA_ARGS__                                                          \
      break;                                                               \
    }                                                                      \
    case 2: {                                                              \
      constexpr uint32_t ALIGNED_VEC_SIZE = 2;                             \
      __VA_ARGS__                                                          \
      break;                                                               \
    }                                                                      \
    default: {                                                             \
      constexpr uint32_t ALIGNED_VEC_SIZE = 1;                             \
      __VA_ARGS__                                                          \
      break;                                                               \
    }                                                                      \
  }

// The fused path of OnlineSoftmax: device pointers, temperature_arr may be null.
template <typename DTypeIn, typename DTypeOut>
cudaError_t OnlineSoftmax(DTypeIn* logits, DTypeOut* output, uint32_t batch_size, uint32_t d,
                          float* temperature_arr, float temperature_val, cudaStream_t stream = 0) {
  constexpr uint32_t BLOCK_THREADS = 1024;  // sm_80 and newer
  constexpr size_t kMaxDtypeSize = sizeof(DTypeIn) > sizeof(DTypeOut) ? sizeof(DTypeIn) : sizeof(DTypeOut);
  const uint32_t vec_size = std::gcd(static_cast<uint32_t>(16 / kMaxDtypeSize), d);
  if (batch_size == 0) return cudaSuccess;

  DISPATCH_ALIGNED_VEC_SIZE(vec_size, VEC_SIZE, {
    dim3 nblks(batch_size);
    dim3 nthrs(BLOCK_THREADS);
    OnlineSoftmaxFusedKernel<BLOCK_THREADS, VEC_SIZE, DTypeIn, DTypeOut>
        <<<nblks, nthrs, 0, stream>>>(logits, output, temperature_arr, temperature_val, d);
  });
  return cudaGetLastError();
}

template cudaError_t OnlineSoftmax<__nv_bfloat16, float>(__nv_bfloat16*, float*, uint32_t, uint32_t, float*, float,
                                                        cudaStream_t);

}  // namespace sampling
}  // namespace flashinfer
