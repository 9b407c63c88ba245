// Log-softmax of fp16 logits divided by a temperature (sampling log-probs, as vLLM / SGLang return them), fp16
// out, one warp per row and four rows per block (block (32, 4)), the row count an argument; three reads of the row
// (max, sum of expf, then (l - max) - logf(sum) stored)
#include <cuda_fp16.h>
/* kerntune:
args  = ["logits: in f16[num_rows * dim]", "logprobs: out f16[num_rows * dim]", "temperature: f32 = 0.7",
         "num_rows: i32 = num_rows", "dim: i32 = dim"]
sizes = [{ num_rows = 4096, dim = 1024 }, { num_rows = 37, dim = 4000 }]
grid  = "(num_rows + 3) / 4"
block = [32, 4]
*/
__global__ void log_softmax_temp_rows(const __half* logits, __half* logprobs, float temperature, int num_rows,
                                      int dim) {
  const int row = blockIdx.x * 4 + threadIdx.y;
  if (row >= num_rows) return;
  const __half* x = logits + (size_t)row * dim;
  __half* y = logprobs + (size_t)row * dim;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < dim; i += 32) m = fmaxf(m, __half2float(x[i]) / temperature);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float sum = 0.f;
  for (int i = threadIdx.x; i < dim; i += 32) sum += expf(__half2float(x[i]) / temperature - m);
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  for (int i = threadIdx.x; i < dim; i += 32) y[i] = __float2half((__half2float(x[i]) / temperature - m) - logf(sum));
}
