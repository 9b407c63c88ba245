// Attention-probability softmax in the style of ONNX Runtime's contrib Attention operator (TensorRT-BERT lineage):
// fp16 scores [batch, num_heads, sequence_length, all_sequence_length] (all = past + new tokens) to fp16
// probabilities, out of place. The mask is not a tensor over the keys but a "1-D mask index": per batch, the valid
// keys are [mask_start[b], mask_end[b]) (right padding from mask_end, left padding from the nullable mask_start),
// a range that is empty falls back to all keys (attend to none = attend to all, for parity with the CPU kernel).
// With is_unidirectional the causal limit is computed from the indices on top of it: query s (blockIdx.x %
// sequence_length) sees keys up to all - sequence_length + s. A nullable relative-position bias [num_heads,
// sequence_length, all_sequence_length], shared by the batch, is added to every score before the softmax. Keys
// outside the valid range get probability 0 (a row with no valid key is all zeros).
// Launch: grid (num_heads * sequence_length, batch), blockIdx.y the batch; template <typename T, unsigned TPB> with
// TPB = 256 threads striding over the keys; thread 0 reads the mask index into shared memory; the max and the sum
// by cub::BlockReduce (a max functor, then Sum), published by thread 0 through __shared__ max_block and
// sum_reverse_block = 1 / sum; three passes over the row (max, sum of expf(x - max), write), fp32 math.
// Tolerance: probabilities are ~1/all_sequence_length (1e-3 and below), so the default f16 atol of 1e-2 would accept
// any output; atol is 1e-6 (above the fp16 subnormal step of 6e-8), rtol stays at the f16 default.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/block/block_reduce.cuh>
#include <cstdint>
#include <cmath>

namespace contrib {

struct MaxOp {
  __device__ __forceinline__ float operator()(const float a, const float b) const { return a > b ? a : b; }
};

/* kerntune:
args  = ["all_sequence_length: i32 = all_len", "sequence_length: i32 = seq_len",
         "mask_end: in i32[batch] ~ randint(all_len / 2, all_len + 1)", "mask_start: in i32[batch] ~ randint(0, 4)",
         "rel_pos_bias: in f16[num_heads * seq_len * all_len]",
         "input: in f16[batch * num_heads * seq_len * all_len]",
         "output: out f16[batch * num_heads * seq_len * all_len]", "is_unidirectional: u8 = 1"]
sizes = [{ batch = 4, num_heads = 32, seq_len = 512, all_len = 512 },
         { batch = 8, num_heads = 32, seq_len = 1, all_len = 4096 },
         { batch = 3, num_heads = 7, seq_len = 33, all_len = 1001 }]
grid  = ["num_heads * seq_len", "batch"]
block = 256
atol  = 1e-6
template_args = ["__half", "256"]
*/
template <typename T, unsigned TPB>
__global__ void MaskedSoftmaxKernel(const int all_sequence_length, const int sequence_length,
                                    const int* mask_end, const int* mask_start, const T* rel_pos_bias,
                                    const T* input, T* output, const bool is_unidirectional) {
  using BlockReduce = cub::BlockReduce<float, TPB>;
  __shared__ typename BlockReduce::TempStorage tmp_storage;
  __shared__ int start_position;
  __shared__ int end_position;
  __shared__ float max_block;
  __shared__ float sum_reverse_block;

  if (threadIdx.x == 0) {
    const int batch = blockIdx.y;
    int start = mask_start != nullptr ? max(0, mask_start[batch]) : 0;
    int end = min(all_sequence_length, mask_end[batch]);
    if (start >= end) {  // no valid key: attend to all of them
      start = 0;
      end = all_sequence_length;
    }
    if (is_unidirectional) {
      const int query = blockIdx.x % sequence_length;
      end = min(end, all_sequence_length - sequence_length + query + 1);
    }
    start_position = start;
    end_position = end;
  }
  __syncthreads();
  const int valid_start = start_position;
  const int valid_end = end_position;

  // input: [B, N, S, all]; blockIdx.x indexes N * S, blockIdx.y is b
  const int64_t offset = (static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * all_sequence_length;
  const int64_t bias_offset = static_cast<int64_t>(blockIdx.x) * all_sequence_length;

  float thread_data_max = -INFINITY;
  for (int i = threadIdx.x; i < valid_end; i += TPB) {
    if (i >= valid_start) {
      float x = static_cast<float>(input[offset + i]);
      if (rel_pos_bias != nullptr) x += static_cast<float>(rel_pos_bias[bias_offset + i]);
      thread_data_max = fmaxf(thread_data_max, x);
    }
  }
  const float max_all = BlockReduce(tmp_storage).Reduce(thread_data_max, MaxOp());
  if (threadIdx.x == 0) max_block = max_all;
  __syncthreads();

  float thread_data_sum = 0.0f;
  for (int i = threadIdx.x; i < valid_end; i += TPB) {
    if (i >= valid_start) {
      float x = static_cast<float>(input[offset + i]);
      if (rel_pos_bias != nullptr) x += static_cast<float>(rel_pos_bias[bias_offset + i]);
      thread_data_sum += expf(x - max_block);
    }
  }
  const float sum_all = BlockReduce(tmp_storage).Sum(thread_data_sum);
  if (threadIdx.x == 0) sum_reverse_block = 1.0f / sum_all;
  __syncthreads();

  for (int i = threadIdx.x; i < all_sequence_length; i += TPB) {
    float p = 0.0f;
    if (i >= valid_start && i < valid_end) {
      float x = static_cast<float>(input[offset + i]);
      if (rel_pos_bias != nullptr) x += static_cast<float>(rel_pos_bias[bias_offset + i]);
      p = expf(x - max_block) * sum_reverse_block;
    }
    output[offset + i] = static_cast<T>(p);
  }
}

// input, output: [batch_size, num_heads, sequence_length, all_sequence_length]; mask_end, mask_start (or null):
// [batch_size] int32; rel_pos_bias (or null): [num_heads, sequence_length, all_sequence_length]. Device pointers.
template <typename T>
cudaError_t ComputeSoftmaxWithMask1D(cudaStream_t stream, const int all_sequence_length, const int sequence_length,
                                     const int batch_size, const int num_heads, const int* mask_end,
                                     const int* mask_start, const T* rel_pos_bias, const T* input, T* output,
                                     const bool is_unidirectional) {
  constexpr unsigned kBlockSize = 256;
  const dim3 grid(sequence_length * num_heads, batch_size, 1);
  MaskedSoftmaxKernel<T, kBlockSize><<<grid, kBlockSize, 0, stream>>>(
      all_sequence_length, sequence_length, mask_end, mask_start, rel_pos_bias, input, output, is_unidirectional);
  return cudaGetLastError();
}

template cudaError_t ComputeSoftmaxWithMask1D<__half>(cudaStream_t, const int, const int, const int, const int,
                                                      const int*, const int*, const __half*, const __half*, __half*,
                                                      const bool);

}  // namespace contrib
