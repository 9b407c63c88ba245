// SwiGLU whose row length is a #define (the model's intermediate size compiled in) and whose kernel takes no size
// argument at all: one block per token row (the token count only in the launch), bf16, gate half first then up,
// silu(gate) * up in fp32, one rounding at the store. 256 threads stride over the row.
#include <cuda_bf16.h>

#define FFN_HIDDEN 11008

/* kerntune:
args  = ["y: out bf16[tokens * 11008]", "gate_up: in bf16[tokens * 2 * 11008]"]
sizes = [{ tokens = 2048 }, { tokens = 3 }]
grid  = "tokens"
block = 256
*/
__global__ void swiglu_fixed_hidden(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ gate_up) {
  const long long row = blockIdx.x;
  const __nv_bfloat16* g = gate_up + row * 2 * FFN_HIDDEN;
  for (int j = threadIdx.x; j < FFN_HIDDEN; j += blockDim.x) {
    const float a = __bfloat162float(g[j]);
    const float b = __bfloat162float(g[j + FFN_HIDDEN]);
    y[row * FFN_HIDDEN + j] = __float2bfloat16(a / (1.0f + __expf(-a)) * b);
  }
}
