// SiLU-and-mul, fp16, a token count argument, grid-stride over tokens (grid = min(tokens, 256))
#include <cuda_fp16.h>
/* kerntune:
args  = ["out: out f16[tokens * d]", "input: in f16[tokens * 2 * d]", "num_tokens: i32 = tokens", "d: i32 = d"]
sizes = [{ tokens = 512, d = 4096 }, { tokens = 77, d = 4099 }]
grid  = "min(tokens, 256)"
block = "256"
*/
__global__ void act_kernel(__half* __restrict__ out, const __half* __restrict__ input, int num_tokens, int d) {
  for (int t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      const float g = __half2float(input[(long long)t * 2 * d + i]);
      const float u = __half2float(input[(long long)t * 2 * d + d + i]);
      out[(long long)t * d + i] = __float2half(g / (1.f + __expf(-g)) * u);
    }
  }
}

void silu_and_mul(__half* out, const __half* input, int num_tokens, int d, cudaStream_t stream) {
  act_kernel<<<num_tokens < 256 ? num_tokens : 256, 256, 0, stream>>>(out, input, num_tokens, d);
}
