// attention probabilities of a BERT / T5-style encoder with a relative-position bias, fp32, out of place: scores
// [batch, heads, q_len, k_len] (batch-major), the bias [heads, q_len, k_len] shared by every sequence of the batch,
// a 0/1 keep-mask [batch, q_len, k_len] shared by every head, added as (1 - m) * -10000 after the bias; expf, the
// row's sum plus 1e-6 inverted once by __fdividef. One block of 128 threads per score row, the row's (batch, head,
// query) from the block index, a shared-memory tree for the max and the sum.
#include <cuda_runtime.h>

/* kerntune:
args  = ["scores: in f32[batch * heads * q_len * k_len]", "rel_bias: in f32[heads * q_len * k_len]",
         "mask: in f32[batch * q_len * k_len] ~ randint(0, 2)", "probs: out f32[batch * heads * q_len * k_len]",
         "batch: i32 = batch", "heads: i32 = heads", "q_len: i32 = q_len", "k_len: i32 = k_len"]
sizes = [{ batch = 4, heads = 12, q_len = 128, k_len = 128 }, { batch = 2, heads = 3, q_len = 17, k_len = 77 }]
grid  = "batch * heads * q_len"
block = "128"
atol  = 1e-6
*/
__global__ void rel_bias_masked_softmax(const float* __restrict__ scores, const float* __restrict__ rel_bias,
                                        const float* __restrict__ mask, float* __restrict__ probs, int batch,
                                        int heads, int q_len, int k_len) {
  __shared__ float red[128];
  const int row = blockIdx.x;
  const int q = row % q_len;
  const int h = (row / q_len) % heads;
  const int b = row / (q_len * heads);
  const float* x = scores + (size_t)row * k_len;
  const float* bias_row = rel_bias + ((size_t)h * q_len + q) * k_len;
  const float* mask_row = mask + ((size_t)b * q_len + q) * k_len;
  float* y = probs + (size_t)row * k_len;
  float m = -1e20f;
  for (int k = threadIdx.x; k < k_len; k += blockDim.x)
    m = fmaxf(m, x[k] + bias_row[k] + (1.0f - mask_row[k]) * -10000.0f);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int k = threadIdx.x; k < k_len; k += blockDim.x)
    sum += expf(x[k] + bias_row[k] + (1.0f - mask_row[k]) * -10000.0f - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = __fdividef(1.0f, red[0] + 1e-6f);
  for (int k = threadIdx.x; k < k_len; k += blockDim.x)
    y[k] = expf(x[k] + bias_row[k] + (1.0f - mask_row[k]) * -10000.0f - m) * inv;
}
