// Sampling probabilities over a vocabulary: probs = softmax(logits / temperature), bf16 logits to fp32
// probabilities, one temperature for the whole batch passed by value (the sampler's batch-wide setting), applied as
// a division on every read. Three reads of the row: its max, the sum of exp(x / T - max), the write. One row per
// block of 256 threads (a #define), each reduction by warp shuffles then the 8 warps' values through shared memory.
// Tolerance: probabilities over a 32k-152k vocabulary are ~1e-5 and below, the size of the default f32 atol; atol
// is 1e-9 so that the comparison means something, rtol stays at the f32 default.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cfloat>

#define SAMPLER_THREADS 256

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* kerntune:
args  = ["logits: in bf16[batch_size * vocab_size]", "probs: out f32[batch_size * vocab_size]",
         "vocab_size: i32 = vocab_size", "temperature: f32 = 0.7"]
sizes = [{ batch_size = 64, vocab_size = 151936 }, { batch_size = 2, vocab_size = 32000 },
         { batch_size = 333, vocab_size = 50257 }]
grid  = "batch_size"
block = 256
atol  = 1e-9
*/
__global__ void sampling_probs_kernel(const __nv_bfloat16* __restrict__ logits, float* __restrict__ probs,
                                      int vocab_size, float temperature) {
  __shared__ float red[SAMPLER_THREADS / 32];
  __shared__ float bcast;
  const __nv_bfloat16* row = logits + (size_t)blockIdx.x * vocab_size;
  float* out = probs + (size_t)blockIdx.x * vocab_size;
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;

  float m = -FLT_MAX;
  for (int i = threadIdx.x; i < vocab_size; i += SAMPLER_THREADS) m = fmaxf(m, __bfloat162float(row[i]) / temperature);
  m = warp_max(m);
  if (lane == 0) red[wid] = m;
  __syncthreads();
  if (wid == 0) {
    float v = lane < SAMPLER_THREADS / 32 ? red[lane] : -FLT_MAX;
    v = warp_max(v);
    if (lane == 0) bcast = v;
  }
  __syncthreads();
  const float row_max = bcast;
  __syncthreads();

  float s = 0.f;
  for (int i = threadIdx.x; i < vocab_size; i += SAMPLER_THREADS)
    s += expf(__bfloat162float(row[i]) / temperature - row_max);
  s = warp_sum(s);
  if (lane == 0) red[wid] = s;
  __syncthreads();
  if (wid == 0) {
    float v = lane < SAMPLER_THREADS / 32 ? red[lane] : 0.f;
    v = warp_sum(v);
    if (lane == 0) bcast = v;
  }
  __syncthreads();
  const float inv_sum = 1.f / bcast;

  for (int i = threadIdx.x; i < vocab_size; i += SAMPLER_THREADS)
    out[i] = expf(__bfloat162float(row[i]) / temperature - row_max) * inv_sum;
}

void sampling_probs(const __nv_bfloat16* logits, float* probs, int batch_size, int vocab_size, float temperature,
                    cudaStream_t stream) {
  sampling_probs_kernel<<<batch_size, SAMPLER_THREADS, 0, stream>>>(logits, probs, vocab_size, temperature);
}
