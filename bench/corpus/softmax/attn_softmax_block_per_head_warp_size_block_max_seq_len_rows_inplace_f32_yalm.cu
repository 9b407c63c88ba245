// Attention-score softmax as andrewkchan's yalm (Yet Another Language Model, a from-scratch C++/CUDA LLM inference
// engine; src/infer.cu, attn_softmax, launched by Block::_attention_cuda between attn_dot and att_mix) writes it
// for single-token decode: the fp32 scores of every query head live in att [n_heads, max_seq_len] (rows
// max_seq_len apart, only the first kv_len = seq_len columns live), already divided by sqrt(head_dim) in attn_dot,
// no mask (the valid length is the mask). One block per head, and the block is ONE WARP: blockDim.x = warp_size,
// the value yalm reads from cudaDevAttrWarpSize at start-up, here a static 32. Three block-strided passes over the
// row: a max (block_all_reduce_max: xor-shuffle warp reduction, a __shared__ float[32] of warp results that warp 0
// reduces again, the result handed to every thread through shared[0]), expf(x - max) written back and summed
// (block_all_reduce_sum, the same shape), then a division by the sum. No eps, no fast-math intrinsics.
// yalm passes the same buffer as both its `att` input and its `out` output (attn_softmax(att, kv_len, max_seq_len,
// n_heads, att)); this file's kernel takes it once, in place, so the columns past seq_len keep their values.
// The reduction helpers are written so that only warp 0 publishes the block result (yalm's let every warp's lane 0
// rewrite its own slot while warp 0 was still reading the slots: a benign race, since the value was unchanged).
// Tolerance: probabilities ~1/seq_len, far below the default f32 atol, so atol is 1e-6.
#include <cuda_runtime.h>
#include <cfloat>

#define FULL_MASK 0xffffffff

__device__ inline float warp_all_reduce_max(float val) {
  // Every lane ends with the max over the warp.
  for (int mask = warpSize / 2; mask > 0; mask /= 2) {
    val = max(val, __shfl_xor_sync(FULL_MASK, val, mask));
  }
  return val;
}

__device__ inline float warp_all_reduce_sum(float val) {
  // Every lane ends with the sum over the warp.
  for (int mask = warpSize / 2; mask > 0; mask /= 2) {
    val += __shfl_xor_sync(FULL_MASK, val, mask);
  }
  return val;
}

__device__ inline float block_all_reduce_max(float val) {
  // Max over a 1-D block as two warp reductions; every thread gets the result.
  __shared__ float shared[32];
  const int wid = threadIdx.x / warpSize;
  const int lane = threadIdx.x % warpSize;

  val = warp_all_reduce_max(val);
  if (blockDim.x <= warpSize) return val;

  if (lane == 0) shared[wid] = val;
  __syncthreads();
  if (wid == 0) {
    val = (threadIdx.x < blockDim.x / warpSize) ? shared[lane] : -FLT_MAX;
    val = warp_all_reduce_max(val);
  }
  __syncthreads();
  if (threadIdx.x == 0) shared[0] = val;
  __syncthreads();
  return shared[0];
}

__device__ inline float block_all_reduce_sum(float val) {
  // Sum over a 1-D block as two warp reductions; every thread gets the result.
  __shared__ float shared[32];
  const int wid = threadIdx.x / warpSize;
  const int lane = threadIdx.x % warpSize;

  val = warp_all_reduce_sum(val);
  if (blockDim.x <= warpSize) return val;

  if (lane == 0) shared[wid] = val;
  __syncthreads();
  if (wid == 0) {
    val = (threadIdx.x < blockDim.x / warpSize) ? shared[lane] : 0.0f;
    val = warp_all_reduce_sum(val);
  }
  __syncthreads();
  if (threadIdx.x == 0) shared[0] = val;
  __syncthreads();
  return shared[0];
}

// Tolerance: softmax probabilities (~1/seq_len) are far below the default f32 atol, so atol is 1e-6.
/* kerntune:
args  = ["att: inout f32[n_heads * max_seq_len]", "seq_len: i32 = seq_len", "max_seq_len: i32 = max_seq_len",
         "n_heads: i32 = n_heads"]
sizes = [{ n_heads = 128, seq_len = 131000, max_seq_len = 131072 }, { n_heads = 32, seq_len = 1200, max_seq_len = 4096 },
         { n_heads = 40, seq_len = 3001, max_seq_len = 4096 }]
grid  = "n_heads"
block = 32
atol  = 1e-6
*/
__global__
void attn_softmax(
  float* att,       // (n_heads, max_seq_len), softmaxed in place over the first seq_len columns
  int seq_len,
  int max_seq_len,
  int n_heads
) {
  int offset = threadIdx.x;
  int h = blockIdx.x;
  int block_size = blockDim.x;
  if (h >= n_heads) return;

  float* atth = att + (size_t)max_seq_len * h;

  float score_max = -FLT_MAX;
  for (int t = offset; t < seq_len; t += block_size) {
    if (atth[t] > score_max) {
      score_max = atth[t];
    }
  }
  score_max = block_all_reduce_max(score_max);
  float score_sum = 0.0f;
  for (int t = offset; t < seq_len; t += block_size) {
    atth[t] = expf(atth[t] - score_max);
    score_sum += atth[t];
  }
  score_sum = block_all_reduce_sum(score_sum);
  for (int t = offset; t < seq_len; t += block_size) {
    atth[t] /= score_sum;
  }
}

// yalm sets this from cudaDevAttrWarpSize in set_cuda_device(); every NVIDIA GPU answers 32.
static int warp_size = 32;

// att: device pointer to the (n_heads, max_seq_len) fp32 scores of one decode step; kv_len live columns per head.
void attn_softmax_cuda(float* att, int kv_len, int max_seq_len, int n_heads, cudaStream_t stream) {
  attn_softmax<<<n_heads, warp_size, 0, stream>>>(att, kv_len, max_seq_len, n_heads);
}
