// GELU(tanh)-and-mul (bf16), the gated activation of Gemma-style MLPs: out[t, i] = gelu_tanh(x[t, i]) * x[t, d + i].
// Written the way it starts out: one token per block, 512 threads, scalar loads, tanhf in fp32.
#include <cuda_bf16.h>

/* kerntune:
args  = ["out: out bf16[tokens * d]", "x: in bf16[tokens * 2 * d]", "d: i32 = d"]
sizes = [{ tokens = 4096, d = 12288 }, { tokens = 2048, d = 14336 }, { tokens = 32, d = 8192 },
         { tokens = 1000, d = 6001 }]
grid  = "tokens"
block = "512"
*/
__global__ void gelu_and_mul_kernel(__nv_bfloat16* out, const __nv_bfloat16* x, int d) {
  const long long t = blockIdx.x;
  for (int i = threadIdx.x; i < d; i += 512) {
    const float a = __bfloat162float(x[t * 2 * d + i]);
    const float g = 0.5f * a * (1.0f + tanhf(0.79788456080286536f * (a + 0.044715f * a * a * a)));
    const __nv_bfloat16 act = __float2bfloat16(g);
    out[t * d + i] = __float2bfloat16(__bfloat162float(act) * __bfloat162float(x[t * 2 * d + d + i]));
  }
}

void gelu_and_mul(__nv_bfloat16* out, const __nv_bfloat16* x, int tokens, int d, cudaStream_t stream) {
  gelu_and_mul_kernel<<<tokens, 512, 0, stream>>>(out, x, d);
}
