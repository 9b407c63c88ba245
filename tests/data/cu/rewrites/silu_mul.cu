// Scalar gated SiLU-and-mul: out[t, i] = silu(x[t, i]) * x[t, d + i], one block per token.
#include <cuda_fp16.h>
/* kerntune:
args  = ["out: out f16[tokens * d]", "x: in f16[tokens * 2 * d]", "d: i32 = d"]
sizes = [{ tokens = 4096, d = 8192 }, { tokens = 77, d = 11007 }]
grid  = "tokens"
block = "1024"
*/
__global__ void silu_and_mul(__half* out, const __half* x, int d) {
  const long long t = blockIdx.x;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float a = __half2float(x[t * 2 * d + i]);
    const float b = __half2float(x[t * 2 * d + d + i]);
    out[t * d + i] = __float2half(a / (1.0f + expf(-a)) * b);
  }
}

void silu_mul(__half* out, const __half* x, int tokens, int d) { silu_and_mul<<<tokens, 1024>>>(out, x, d); }
