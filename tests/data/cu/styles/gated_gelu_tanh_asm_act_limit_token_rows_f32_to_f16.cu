// GELU(tanh)-and-mul of two fp32 GEMM outputs into fp16 with an activation limit, in another style than ExLlamaV3's
// flat float2 kernel: the output first and the up projection before the gate, one block per token walking its
// columns block-strided, the activation a template <int> chosen with `if constexpr ... else` against constexpr int
// constants (the instantiation names one), tanh as one tanh.approx.f32 of inline asm, the double literal 1.0 in
// 0.5 g (1 + t); the limit (0 = off) clamps up to [-limit, limit] and the activation from above with conditional
// expressions; the fp32 result clamped to the finite fp16 range (min first, then max) before it is rounded.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace ffn {

constexpr int kSiluAct = 3;
constexpr int kGeluTanhAct = 7;
constexpr float kFp16Max = 65504.0f;

__device__ __forceinline__ float approx_tanh(float v) {
  float out;
  asm volatile("tanh.approx.f32 %0, %1;" : "=f"(out) : "f"(v));
  return out;
}

/* kerntune:
args  = ["out: out f16[tokens * width]", "up: in f32[tokens * width]", "gate: in f32[tokens * width]",
         "tokens: i32 = tokens", "width: i32 = width", "limit: f32 = 0.0"]
sizes = [{ tokens = 16, width = 11008 }, { tokens = 333, width = 1376 }, { tokens = 5, width = 1001 }]
grid  = "tokens"
block = "128"
*/
template <int kAct>
__global__ void gated_rows_kernel(__half* out, const float* up, const float* gate, int tokens, int width,
                                  float limit) {
  const long long token = blockIdx.x;
  const float* gate_row = gate + token * width;
  const float* up_row = up + token * width;
  __half* out_row = out + token * width;
  for (int col = threadIdx.x; col < width; col += blockDim.x) {
    const float g = gate_row[col];
    float u = up_row[col];
    float a;
    if constexpr (kAct == kGeluTanhAct) {
      const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
      a = 0.5f * g * (1.0 + approx_tanh(inner));
    } else {
      a = g / (1.0f + __expf(-g));
    }
    if (limit != 0.0f) {
      u = u < -limit ? -limit : u;
      u = u > limit ? limit : u;
      a = a > limit ? limit : a;
    }
    const float prod = a * u;
    out_row[col] = __float2half_rn(fmaxf(fminf(prod, kFp16Max), -kFp16Max));
  }
}

}  // namespace ffn

void gelu_tanh_and_mul(__half* out, const float* up, const float* gate, int tokens, int width, float limit,
                       cudaStream_t stream) {
  ffn::gated_rows_kernel<ffn::kGeluTanhAct><<<tokens, 128, 0, stream>>>(out, up, gate, tokens, width, limit);
}
