// Softmax of fp16 scores divided by a scalar (sqrt(d) passed by value, attention-style), fp16 out, one warp per
// row, the row count from the grid, reads the row three times
#include <cuda_fp16.h>
/* kerntune:
args  = ["scores: in f16[rows * n]", "out: out f16[rows * n]", "n: i32 = n", "denom: f32 = 11.3137"]
sizes = [{ rows = 4096, n = 1024 }, { rows = 5, n = 2000 }]
grid  = "rows"
block = 32
*/
__global__ void softmax_div(const __half* scores, __half* out, int n, float denom) {
  const __half* r = scores + (size_t)blockIdx.x * n;
  float m = -1e30f;
  for (int i = threadIdx.x; i < n; i += 32) m = fmaxf(m, __half2float(r[i]) / denom);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += 32) s += expf(__half2float(r[i]) / denom - m);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  for (int i = threadIdx.x; i < n; i += 32) out[(size_t)blockIdx.x * n + i] = __float2half(expf(__half2float(r[i]) / denom - m) / s);
}
