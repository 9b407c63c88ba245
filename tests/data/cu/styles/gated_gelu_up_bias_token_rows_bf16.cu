// Gated GELU (tanh) with the up projection as a tensor of its own and a bias on it only (a gated FFN whose second
// GEMM leaves its bias to the activation: out = gelu_tanh(x) * (up + up_bias)), bf16 scalars, out of place, one
// token per block striding over the hidden columns; the bias pointer may be null (checked in the kernel). Numerics:
// the GELU in fp32 rounded to bf16, the bias add a bf16 __hadd, the product a bf16 __hmul.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["out: out bf16[tokens * hidden]", "up_bias: in bf16[hidden]", "x: in bf16[tokens * hidden]",
         "up: in bf16[tokens * hidden]", "hidden: i32 = hidden", "tokens: i32 = tokens"]
sizes = [{ tokens = 64, hidden = 4096 }, { tokens = 7, hidden = 11008 }, { tokens = 3, hidden = 1001 }]
grid  = "tokens"
block = "256"
*/
__global__ void gelu_tanh_mul_up_bias(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ up_bias,
                                      const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ up,
                                      int hidden, int tokens) {
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * hidden;
  const __nv_bfloat16* ur = up + row * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = __bfloat162float(xr[i]);
    const float act = 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    __nv_bfloat16 u = ur[i];
    if (up_bias != nullptr) {
      u = __hadd(u, up_bias[i]);
    }
    out[row * hidden + i] = __hmul(__float2bfloat16(act), u);
  }
}

void gelu_tanh_mul(__nv_bfloat16* out, const __nv_bfloat16* up_bias, const __nv_bfloat16* x,
                   const __nv_bfloat16* up, int tokens, int hidden, cudaStream_t stream) {
  gelu_tanh_mul_up_bias<<<tokens, 256, 0, stream>>>(out, up_bias, x, up, hidden, tokens);
}
