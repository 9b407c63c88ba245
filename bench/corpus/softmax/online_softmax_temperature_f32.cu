// Sampling softmax over the vocabulary (fp32 logits -> fp32 probabilities) with a per-request temperature, written
// as an online softmax: each thread keeps a running (max, sum) pair in one pass, the pairs are merged across the
// warp with shuffles and across warps through shared memory, and a second pass writes exp((x / T) - max) / sum.
// One row per block of 1024 threads (a constexpr).
// Tolerance: probabilities over a 32k-152k vocabulary are ~1e-5 and below, the size of the default f32 atol; atol
// is 1e-9 so that the comparison means something, rtol stays at the f32 default.
#include <cuda_runtime.h>
#include <cstdint>

constexpr int kThreads = 1024;

struct MaxSum {
  float m;
  float d;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const bool a_bigger = a.m > b.m;
  const MaxSum big = a_bigger ? a : b;
  const MaxSum small = a_bigger ? b : a;
  return {big.m, big.d + small.d * expf(small.m - big.m)};
}

/* kerntune:
args  = ["logits: in f32[batch * vocab]", "temperatures: in f32[batch] ~ uniform(0.5, 1.5)",
         "probs: out f32[batch * vocab]", "vocab: i32 = vocab"]
sizes = [{ batch = 256, vocab = 128256 }, { batch = 16, vocab = 151936 }, { batch = 37, vocab = 32001 }]
grid  = "batch"
block = "1024"
atol  = 1e-9
*/
__global__ void temperature_softmax_kernel(const float* __restrict__ logits, const float* __restrict__ temperatures,
                                           float* __restrict__ probs, int vocab) {
  __shared__ MaxSum warp_md[kThreads / 32];
  __shared__ MaxSum row_md;
  const int row = blockIdx.x;
  const float inv_t = 1.0f / temperatures[row];
  const float* x = logits + (int64_t)row * vocab;
  float* p = probs + (int64_t)row * vocab;

  MaxSum md{-INFINITY, 0.f};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = x[i] * inv_t;
    if (v > md.m) {
      md.d = md.d * expf(md.m - v) + 1.0f;
      md.m = v;
    } else {
      md.d += expf(v - md.m);
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffff, md.m, off), __shfl_xor_sync(0xffffffff, md.d, off)};
    md = merge(md, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_md[warp] = md;
  __syncthreads();
  if (warp == 0) {
    md = lane < kThreads / 32 ? warp_md[lane] : MaxSum{-INFINITY, 0.f};
    for (int off = 16; off > 0; off >>= 1) {
      const MaxSum other{__shfl_xor_sync(0xffffffff, md.m, off), __shfl_xor_sync(0xffffffff, md.d, off)};
      md = merge(md, other);
    }
    if (lane == 0) row_md = md;
  }
  __syncthreads();
  const float m = row_md.m;
  const float inv_d = 1.0f / row_md.d;
  for (int i = threadIdx.x; i < vocab; i += kThreads) p[i] = expf(x[i] * inv_t - m) * inv_d;
}

void temperature_softmax(const float* logits, const float* temperatures, float* probs, int batch, int vocab,
                         cudaStream_t stream) {
  temperature_softmax_kernel<<<batch, kThreads, 0, stream>>>(logits, temperatures, probs, vocab);
}
