// SiLU-and-mul into fp8 e4m3 bytes with the per-tensor scale passed by value (a fused gated activation + static
// quantization in front of an fp8 down projection, the scale a host float as TensorRT-LLM passes it), bf16, one
// token per block striding over its row, the input first, the token count and row length last. fp32 math
// throughout: neither silu(gate) nor the product is rounded to bf16; the product is multiplied by the reciprocal
// of the scale (taken once per thread), clamped to +-448 and converted by the saturating __nv_cvt_float_to_fp8.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>
/* kerntune:
args  = ["gate_up: in bf16[n_tok * 2 * inter]", "q: out u8[n_tok * inter]", "qscale: f32 = 0.0375",
         "n_tok: i32 = n_tok", "inter: i32 = inter"]
sizes = [{ n_tok = 512, inter = 11008 }, { n_tok = 5, inter = 1001 }]
grid  = "n_tok"
block = "256"
*/
__global__ void swiglu_fp8_rows(const __nv_bfloat16* __restrict__ gate_up, uint8_t* __restrict__ q, float qscale,
                                int n_tok, int inter) {
  const float inv = 1.0f / qscale;
  const __nv_bfloat16* row = gate_up + (size_t)blockIdx.x * 2 * inter;
  uint8_t* dst = q + (size_t)blockIdx.x * inter;
  for (int i = threadIdx.x; i < inter; i += blockDim.x) {
    const float g = __bfloat162float(row[i]);
    const float u = __bfloat162float(row[inter + i]);
    const float v = g / (1.0f + expf(-g)) * u * inv;
    dst[i] = __nv_cvt_float_to_fp8(fmaxf(-448.0f, fminf(v, 448.0f)), __NV_SATFINITE, __NV_E4M3);
  }
}

void swiglu_fp8(const __nv_bfloat16* gate_up, uint8_t* q, float qscale, int n_tok, int inter, cudaStream_t st) {
  swiglu_fp8_rows<<<n_tok, 256, 0, st>>>(gate_up, q, qscale, n_tok, inter);
}
