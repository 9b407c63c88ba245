// GEGLU with the projection's bias added in the activation (diffusers' GEGLU after a GEMM without its bias, as ONNX
// Runtime's BiasSplitGelu fuses it), in bf16: proj [tokens, 2 * d] holds the value half first and the gate second,
// bias [2 * d] is added to both halves (bf16 __hadd: each sum rounded), the erf GELU of the gate in fp32 with its
// argument divided by a named float sqrt(2), rounded to bf16 and multiplied by the value in bf16 (__hmul). The
// outputs and the bias first, the width and the token count runtime arguments; a grid-stride loop over the tokens
// (the grid capped at 1024 blocks), each block striding over the columns.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

constexpr float kSqrt2 = 1.41421356237309505f;

/* kerntune:
args  = ["out: out bf16[tokens * d]", "bias: in bf16[2 * d]", "proj: in bf16[tokens * 2 * d]",
         "tokens: i32 = tokens", "d: i32 = d"]
sizes = [{ tokens = 4096, d = 2560 }, { tokens = 77, d = 1280 }, { tokens = 5, d = 1000 }]
grid  = "min(tokens, 1024)"
block = "256"
*/
__global__ void geglu_row_bias_bf16(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ bias,
                                    const __nv_bfloat16* __restrict__ proj, int tokens, int d) {
  for (int t = blockIdx.x; t < tokens; t += gridDim.x) {
    const __nv_bfloat16* row = proj + (size_t)t * 2 * d;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      const __nv_bfloat16 value = __hadd(row[c], bias[c]);
      const __nv_bfloat16 gate = __hadd(row[d + c], bias[d + c]);
      const float g = __bfloat162float(gate);
      const float act = 0.5f * g * (1.0f + erff(g / kSqrt2));
      out[(size_t)t * d + c] = __hmul(value, __float2bfloat16(act));
    }
  }
}

void geglu_row_bias(__nv_bfloat16* out, const __nv_bfloat16* bias, const __nv_bfloat16* proj, int tokens, int d,
                    cudaStream_t stream) {
  geglu_row_bias_bf16<<<tokens < 1024 ? tokens : 1024, 256, 0, stream>>>(out, bias, proj, tokens, d);
}
