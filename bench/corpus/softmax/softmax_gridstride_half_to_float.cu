// Softmax of fp16 logits into fp32 probabilities, a persistent grid-stride loop over rows (grid = min(rows,
// 1024), SOFTMAX_THREADS per block): a max pass, a pass that writes the exponentials into the output and sums
// them, and a pass that rescales the output in place; shared-memory tree reductions.
// Tolerance: probabilities over a 32k-152k vocabulary are ~1e-5 and below, so atol is 1e-9 instead of the f32
// default 1e-5.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>

#define SOFTMAX_THREADS 256

/* kerntune:
args  = ["logits: in f16[num_rows * vocab]", "probs: out f32[num_rows * vocab]", "num_rows: i32 = num_rows",
         "vocab: i32 = vocab"]
sizes = [{ num_rows = 128, vocab = 128256 }, { num_rows = 16, vocab = 151936 }, { num_rows = 1029, vocab = 32003 }]
grid  = "min(num_rows, 1024)"
block = "256"
atol  = 1e-9
*/
__global__ void softmax_rows_half_to_float(const __half* __restrict__ logits, float* __restrict__ probs,
                                           int num_rows, int vocab) {
  __shared__ float sbuf[SOFTMAX_THREADS];
  const int tid = threadIdx.x;
  for (int row = blockIdx.x; row < num_rows; row += gridDim.x) {
    const __half* x = logits + (size_t)row * vocab;
    float* p = probs + (size_t)row * vocab;

    float m = -INFINITY;
    for (int i = tid; i < vocab; i += SOFTMAX_THREADS) m = fmaxf(m, __half2float(x[i]));
    sbuf[tid] = m;
    __syncthreads();
    for (int s = SOFTMAX_THREADS / 2; s > 0; s >>= 1) {
      if (tid < s) sbuf[tid] = fmaxf(sbuf[tid], sbuf[tid + s]);
      __syncthreads();
    }
    m = sbuf[0];
    __syncthreads();

    float sum = 0.f;
    for (int i = tid; i < vocab; i += SOFTMAX_THREADS) {
      const float e = expf(__half2float(x[i]) - m);
      p[i] = e;
      sum += e;
    }
    sbuf[tid] = sum;
    __syncthreads();
    for (int s = SOFTMAX_THREADS / 2; s > 0; s >>= 1) {
      if (tid < s) sbuf[tid] += sbuf[tid + s];
      __syncthreads();
    }
    const float inv = 1.f / sbuf[0];
    __syncthreads();

    for (int i = tid; i < vocab; i += SOFTMAX_THREADS) p[i] *= inv;
  }
}

void softmax_half_to_float(const __half* logits, float* probs, int num_rows, int vocab, cudaStream_t stream) {
  const int grid = std::min(num_rows, 1024);
  softmax_rows_half_to_float<<<grid, SOFTMAX_THREADS, 0, stream>>>(logits, probs, num_rows, vocab);
}
