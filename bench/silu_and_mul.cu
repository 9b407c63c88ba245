// SiLU-and-mul (fp16), the gated activation of LLaMA-style MLPs: out[t, i] = silu(x[t, i]) * x[t, d + i].
// Written the way it starts out: one token per block, 256 threads, scalar loads, expf in fp32 with conversions.
#include <cuda_fp16.h>

/* kerntune:
args  = ["out: out f16[tokens * d]", "x: in f16[tokens * 2 * d]", "d: i32 = d"]
sizes = [{ tokens = 4096, d = 11008 }, { tokens = 8192, d = 14336 }, { tokens = 16, d = 14336 },
         { tokens = 1000, d = 13824 }, { tokens = 77, d = 4099 }]
grid  = "tokens"
block = "256"
*/
__global__ void silu_and_mul_kernel(__half* out, const __half* x, int d) {
  const long long t = blockIdx.x;
  for (int i = threadIdx.x; i < d; i += 256) {
    const float a = __half2float(x[t * 2 * d + i]);
    const __half act = __float2half(a / (1.0f + expf(-a)));
    out[t * d + i] = __float2half(__half2float(act) * __half2float(x[t * 2 * d + d + i]));
  }
}

void silu_and_mul(__half* out, const __half* x, int tokens, int d, cudaStream_t stream) {
  silu_and_mul_kernel<<<tokens, 256, 0, stream>>>(out, x, d);
}
