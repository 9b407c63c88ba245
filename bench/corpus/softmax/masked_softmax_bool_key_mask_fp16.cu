// Attention probabilities from raw fp16 scores and a boolean key-padding mask, as a Hugging Face / PyTorch model
// port computes them: scores.masked_fill(mask[:, None, None, :] == 0, -inf).softmax(-1). Scores and probabilities
// are [batch, heads, q_len, k_len] (out of place); the mask is uint8 [batch, k_len] (1 = keep the key, 0 = masked)
// and is shared by every head and query of a batch entry. One block of 128 threads per (batch, head, query) row,
// blockIdx.x the flat row; fp32 math with expf; three passes over global memory (the max over kept keys, the sum of
// exponentials, the write), each re-reading the scores and the mask. The block reductions are a plain shared-memory
// halving tree over the 128 per-thread values, one buffer reused for the max and for the sum.
// A query row whose keys are all masked: softmax over all -inf is NaN in PyTorch; this kernel writes zeros for the
// whole row instead (the row max stays -inf and the sum 0, which is what it tests), as serving code does so that
// padded queries do not poison the following matmul.
// Tolerance: probabilities are ~2/k_len (1e-3 and below), so the default f16 atol of 1e-2 would accept any output;
// atol is 1e-6 (above the fp16 subnormal step of 6e-8), rtol stays at the f16 default.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cmath>

constexpr int kSoftmaxThreads = 128;

/* kerntune:
args  = ["scores: in f16[batch * heads * q_len * k_len]", "mask: in u8[batch * k_len] ~ randint(0, 2)",
         "probs: out f16[batch * heads * q_len * k_len]", "batch: i32 = batch", "heads: i32 = heads",
         "q_len: i32 = q_len", "k_len: i32 = k_len"]
sizes = [{ batch = 4, heads = 16, q_len = 512, k_len = 1024 }, { batch = 8, heads = 32, q_len = 1, k_len = 4096 },
         { batch = 3, heads = 7, q_len = 77, k_len = 1001 }]
grid  = "batch * heads * q_len"
block = 128
atol  = 1e-6
*/
template <typename scalar_t>
__global__ void masked_softmax_bool_key_mask_kernel(const scalar_t* __restrict__ scores,
                                                    const uint8_t* __restrict__ mask, scalar_t* __restrict__ probs,
                                                    int batch, int heads, int q_len, int k_len) {
  const int row = blockIdx.x;  // (b * heads + h) * q_len + q
  if (row >= batch * heads * q_len) return;  // the whole block leaves together, before any barrier
  const int b = row / (heads * q_len);
  const int tid = threadIdx.x;

  const scalar_t* row_in = scores + (int64_t)row * k_len;
  scalar_t* row_out = probs + (int64_t)row * k_len;
  const uint8_t* key_keep = mask + (int64_t)b * k_len;

  __shared__ float red[kSoftmaxThreads];

  // pass 1: the max over the kept keys (masked keys are -inf, as masked_fill makes them)
  float thread_max = -INFINITY;
  for (int k = tid; k < k_len; k += kSoftmaxThreads) {
    if (key_keep[k] != 0) thread_max = fmaxf(thread_max, static_cast<float>(row_in[k]));
  }
  red[tid] = thread_max;
  __syncthreads();
  for (int s = kSoftmaxThreads / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
    __syncthreads();
  }
  const float row_max = red[0];
  __syncthreads();  // every thread has read red[0] before the buffer is reused for the sum

  // pass 2: the sum of exp(x - max) over the kept keys (exp(-inf) = 0 for the masked ones)
  float thread_sum = 0.f;
  if (row_max != -INFINITY) {
    for (int k = tid; k < k_len; k += kSoftmaxThreads) {
      if (key_keep[k] != 0) thread_sum += expf(static_cast<float>(row_in[k]) - row_max);
    }
  }
  red[tid] = thread_sum;
  __syncthreads();
  for (int s = kSoftmaxThreads / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    __syncthreads();
  }
  const float row_sum = red[0];

  // pass 3: the probabilities; a fully masked row (no kept key: max -inf, sum 0) is written as zeros, not NaN
  const bool any_kept = row_max != -INFINITY && row_sum > 0.f;
  const float inv_sum = any_kept ? 1.f / row_sum : 0.f;
  for (int k = tid; k < k_len; k += kSoftmaxThreads) {
    const float p = (any_kept && key_keep[k] != 0) ? expf(static_cast<float>(row_in[k]) - row_max) * inv_sum : 0.f;
    row_out[k] = static_cast<scalar_t>(p);
  }
}

// scores, probs: [batch, heads, q_len, k_len]; mask: [batch, k_len], nonzero = attend to the key.
template <typename scalar_t>
void masked_softmax_bool_key_mask(const scalar_t* scores, const uint8_t* mask, scalar_t* probs, int batch,
                                  int heads, int q_len, int k_len, cudaStream_t stream) {
  const int rows = batch * heads * q_len;
  if (rows == 0 || k_len == 0) return;
  dim3 grid(rows);
  dim3 block(kSoftmaxThreads);
  masked_softmax_bool_key_mask_kernel<scalar_t><<<grid, block, 0, stream>>>(scores, mask, probs, batch, heads,
                                                                            q_len, k_len);
}

template void masked_softmax_bool_key_mask<__half>(const __half* scores, const uint8_t* mask, __half* probs,
                                                   int batch, int heads, int q_len, int k_len, cudaStream_t stream);
