// Log-softmax of the vocabulary logits for beam search / returned logprobs, as FasterTransformer's and
// TensorRT-LLM's beam-search kernels compute it: the online normalizer of Milakov & Gimelshein ("Online normalizer
// calculation for softmax"), each thread folding its columns into an MD {m: running max, d: sum of exp(x - m)}
// pair with reduce_md_op, the pairs merged by cub::BlockReduce with that same function as the operator; thread 0
// publishes log_sum = m + __logf(d) through __shared__, and a second pass writes logp = x - log_sum.
// Logits bf16 [batch_size, vocab_size_padded] (the lm_head output padded to a multiple of the tensor-parallel
// granularity; only the first vocab_size columns are real), log-probs fp32 [batch_size, vocab_size] dense.
// template <typename T, int THREADBLOCK_SIZE> with __launch_bounds__, the launcher instantiating 256 threads,
// one block per row; __expf in the merge; fp32 throughout.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cub/cub.cuh>
#include <cfloat>
#include <cstdint>

struct __align__(8) MD {
  float m;
  float d;
};

__device__ __forceinline__ MD reduce_md_op(MD a, MD b) {
  const bool a_bigger = (a.m > b.m);
  const MD bigger_m = a_bigger ? a : b;
  const MD smaller_m = a_bigger ? b : a;
  MD res;
  res.d = bigger_m.d + smaller_m.d * __expf(smaller_m.m - bigger_m.m);
  res.m = bigger_m.m;
  return res;
}

// Default tolerance kept: the outputs are log-probabilities of magnitude ~10, not probabilities.
/* kerntune:
args  = ["logits: in bf16[batch_size * vocab_size_padded]", "log_probs: out f32[batch_size * vocab_size]",
         "vocab_size: i32 = vocab_size", "vocab_size_padded: i32 = vocab_size_padded"]
sizes = [{ batch_size = 512, vocab_size = 50257, vocab_size_padded = 50304 },
         { batch_size = 4, vocab_size = 128256, vocab_size_padded = 128256 },
         { batch_size = 37, vocab_size = 32001, vocab_size_padded = 32064 }]
grid  = "batch_size"
block = 256
*/
template <typename T, int THREADBLOCK_SIZE>
__launch_bounds__(THREADBLOCK_SIZE) __global__
    void log_softmax_kernel(const T* __restrict__ logits, float* __restrict__ log_probs, const int vocab_size,
                            const int vocab_size_padded) {
  const int tid = threadIdx.x;
  const int bid = blockIdx.x;
  const T* row = logits + static_cast<int64_t>(bid) * vocab_size_padded;
  float* out_row = log_probs + static_cast<int64_t>(bid) * vocab_size;

  MD partial;
  partial.m = -FLT_MAX;
  partial.d = 0.0f;
  for (int i = tid; i < vocab_size; i += THREADBLOCK_SIZE) {
    MD new_elem;
    new_elem.m = static_cast<float>(row[i]);
    new_elem.d = 1.0f;
    partial = reduce_md_op(partial, new_elem);
  }

  typedef cub::BlockReduce<MD, THREADBLOCK_SIZE> BlockReduce;
  __shared__ typename BlockReduce::TempStorage temp_storage;
  __shared__ float s_log_sum;

  const MD total = BlockReduce(temp_storage).Reduce(partial, reduce_md_op);
  if (tid == 0) s_log_sum = total.m + __logf(total.d);
  __syncthreads();

  for (int i = tid; i < vocab_size; i += THREADBLOCK_SIZE) {
    out_row[i] = static_cast<float>(row[i]) - s_log_sum;
  }
}

// Host launcher (invokeLogSoftmax-style): device pointers, one block per sequence.
void invoke_log_softmax(float* log_probs, const __nv_bfloat16* logits, const int batch_size, const int vocab_size,
                        const int vocab_size_padded, cudaStream_t stream) {
  constexpr int kBlockSize = 256;
  dim3 grid(batch_size);
  dim3 block(kBlockSize);
  log_softmax_kernel<__nv_bfloat16, kBlockSize>
      <<<grid, block, 0, stream>>>(logits, log_probs, vocab_size, vocab_size_padded);
}
