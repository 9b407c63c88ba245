// Greedy sampling: per-row argmax over fp16 logits [batch, vocab], the maximum value (fp32) and its index (int64,
// the first occurrence on ties, as torch.argmax). One row per block of num_threads = blockDim.x threads (512 from
// the launcher): each thread scans a strided slice, then (value, index) pairs are merged by warp shuffles, one
// pair per warp goes through shared memory, and the first warp merges those.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

#define WARP_SIZE 32

__device__ __forceinline__ void argmax_merge(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
    const float ov = __shfl_down_sync(0xffffffffu, v, offset);
    const int oi = __shfl_down_sync(0xffffffffu, i, offset);
    argmax_merge(v, i, ov, oi);
  }
}

/* kerntune:
args  = ["logits: in f16[batch * vocab]", "max_vals: out f32[batch]", "max_ids: out i64[batch]", "vocab: i32 = vocab"]
sizes = [{ batch = 512, vocab = 128256 }, { batch = 4, vocab = 151936 }, { batch = 37, vocab = 50257 }]
grid  = "batch"
block = "512"
*/
__global__ void row_argmax_kernel(const __half* __restrict__ logits, float* __restrict__ max_vals,
                                  int64_t* __restrict__ max_ids, int vocab) {
  __shared__ float s_val[WARP_SIZE];
  __shared__ int s_idx[WARP_SIZE];
  const int num_threads = blockDim.x;
  const int tid = threadIdx.x;
  const __half* row = logits + (int64_t)blockIdx.x * vocab;

  float best = -INFINITY;
  int best_i = vocab;  // no element seen: loses every tie against a real index
  if (tid < vocab) {
    best = __half2float(row[tid]);
    best_i = tid;
  }
  for (int j = tid + num_threads; j < vocab; j += num_threads) {
    const float v = __half2float(row[j]);
    if (v > best) {
      best = v;
      best_i = j;
    }
  }

  warp_argmax(best, best_i);
  const int lane = tid % WARP_SIZE;
  const int warp = tid / WARP_SIZE;
  if (lane == 0) {
    s_val[warp] = best;
    s_idx[warp] = best_i;
  }
  __syncthreads();

  if (warp == 0) {
    const int num_warps = (num_threads + WARP_SIZE - 1) / WARP_SIZE;
    best = lane < num_warps ? s_val[lane] : -INFINITY;
    best_i = lane < num_warps ? s_idx[lane] : vocab;
    warp_argmax(best, best_i);
    if (lane == 0) {
      max_vals[blockIdx.x] = best;
      max_ids[blockIdx.x] = best_i;
    }
  }
}

void row_argmax(const __half* logits, float* max_vals, int64_t* max_ids, int batch, int vocab, cudaStream_t stream) {
  const int threads = 512;
  row_argmax_kernel<<<batch, threads, 0, stream>>>(logits, max_vals, max_ids, vocab);
}
