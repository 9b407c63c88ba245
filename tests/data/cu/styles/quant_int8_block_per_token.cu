// Per-token-group int8 quantization, bf16 input, a block per token and a thread per group (no count of all the
// groups among the arguments: the token is the block), row-major scales.
#include <cuda_bf16.h>
/* kerntune:
args  = ["x: in bf16[T * H]", "q: out i8[T * H]", "sc: out f32[T * H / 64]", "H: i32 = H"]
sizes = [{ T = 128, H = 2048 }, { T = 9, H = 1024 }]
grid  = "T"
block = "H / 64"
*/
__global__ void quant_per_token(const __nv_bfloat16* x, signed char* q, float* sc, int H) {
  const int g = threadIdx.x;
  const __nv_bfloat16* src = x + (size_t)blockIdx.x * H + g * 64;
  float m = 1e-10f;
  for (int i = 0; i < 64; ++i) m = fmaxf(m, fabsf(__bfloat162float(src[i])));
  const float s = m / 127.f;
  for (int i = 0; i < 64; ++i)
    q[(size_t)blockIdx.x * H + g * 64 + i] = (signed char)__float2int_rn(fminf(fmaxf(__bfloat162float(src[i]) / s, -128.f), 127.f));
  sc[(size_t)blockIdx.x * (H / 64) + g] = s;
}

void quant_per_token_launch(const __nv_bfloat16* x, signed char* q, float* sc, int T, int H, cudaStream_t stream) {
  quant_per_token<<<T, H / 64, 0, stream>>>(x, q, sc, H);
}
