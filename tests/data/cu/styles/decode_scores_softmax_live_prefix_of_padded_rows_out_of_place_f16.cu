// decode-step attention probabilities in the llama2.c style, fp16: scores [n_heads, max_len] of a padded KV
// window, of which only the first `size` columns are live (pos + 1 on the step the caller runs), softmaxed out of
// place into probabilities of the same padded shape; the columns past `size` are neither read nor written (the
// output is declared inout: they keep what the buffer held). One block of 256 threads per head, the head's row at
// blockIdx.x * max_len, a shared-memory tree for the max and for the sum, expf, the division by the sum per element.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* kerntune:
args  = ["scores: in f16[n_heads * max_len]", "probs: inout f16[n_heads * max_len]", "size: i32 = size",
         "max_len: i32 = max_len"]
sizes = [{ n_heads = 64, size = 1500, max_len = 2048 }, { n_heads = 8, size = 77, max_len = 512 }]
grid  = "n_heads"
block = "256"
atol  = 1e-5
*/
__global__ void decode_softmax_prefix(const __half* __restrict__ scores, __half* __restrict__ probs, int size,
                                      int max_len) {
  __shared__ float red[256];
  const __half* in = scores + (size_t)blockIdx.x * max_len;
  __half* out = probs + (size_t)blockIdx.x * max_len;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < size; i += blockDim.x) m = fmaxf(m, __half2float(in[i]));
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int i = threadIdx.x; i < size; i += blockDim.x) sum += expf(__half2float(in[i]) - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  sum = red[0];
  for (int i = threadIdx.x; i < size; i += blockDim.x) out[i] = __float2half(expf(__half2float(in[i]) - m) / sum);
}
