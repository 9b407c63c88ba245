// SiLU-and-mul (fp16) as the simplest elementwise port: one output element per thread over a flat index of
// num_tokens * d, the token and column recovered by division, scalar loads of gate and up, fp32 math, one rounding.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define BLOCK_SIZE 256

/* kerntune:
args  = ["out: out f16[num_tokens * d]", "x: in f16[num_tokens * 2 * d]", "num_tokens: i32 = num_tokens", "d: i32 = d"]
sizes = [{ num_tokens = 4096, d = 14336 }, { num_tokens = 16, d = 11008 }, { num_tokens = 1001, d = 4099 }]
grid  = "cdiv(num_tokens * d, 256)"
block = "256"
*/
__global__ void silu_and_mul_elementwise(__half* out, const __half* x, int num_tokens, int d) {
  const long long idx = (long long)blockIdx.x * BLOCK_SIZE + threadIdx.x;
  if (idx >= (long long)num_tokens * d) return;
  const long long t = idx / d;
  const int j = (int)(idx % d);
  const float gate = __half2float(x[t * 2 * d + j]);
  const float up = __half2float(x[t * 2 * d + d + j]);
  out[idx] = __float2half(gate / (1.0f + expf(-gate)) * up);
}

void silu_and_mul_scalar(__half* out, const __half* x, int num_tokens, int d, cudaStream_t stream) {
  const long long n = (long long)num_tokens * d;
  const int blocks = (int)((n + BLOCK_SIZE - 1) / BLOCK_SIZE);
  silu_and_mul_elementwise<<<blocks, BLOCK_SIZE, 0, stream>>>(out, x, num_tokens, d);
}
