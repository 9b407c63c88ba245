// Per-token-group fp8 e4m3 quantization for a block-scaled GEMM, bf16 input, one block per token: each warp takes
// groups of 128 of the token in turn. Scales are powers of two (ldexpf of the rounded-up exponent) and stored by
// group column: s[col * stride + token], the stride an argument (the padded token count, here the token count).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
/* kerntune:
args  = ["a: in bf16[M * K]", "aq: out u8[M * K]", "s: out f32[K / 128 * M]", "K: i32 = K", "stride: i32 = M"]
sizes = [{ M = 96, K = 2048 }, { M = 5, K = 512 }]
grid  = "M"
block = "128"
*/
__global__ void quant_rows_pow2(const __nv_bfloat16* a, __nv_fp8_e4m3* aq, float* s, int K, int stride) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int col = warp; col < K / 128; col += blockDim.x / 32) {
    const __nv_bfloat16* src = a + (size_t)blockIdx.x * K + col * 128;
    float m = 0.f;
    for (int i = lane; i < 128; i += 32) m = fmaxf(m, fabsf(__bfloat162float(src[i])));
    for (int o = 16; o; o /= 2) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, o));
    m = __shfl_sync(0xffffffffu, m, 0);
    const float sc = ldexpf(1.f, (int)ceilf(log2f(fmaxf(m, 1e-6f) / 448.f)));
    for (int i = lane; i < 128; i += 32)
      aq[(size_t)blockIdx.x * K + col * 128 + i] = __nv_fp8_e4m3(__bfloat162float(src[i]) / sc);
    if (lane == 0) s[col * stride + blockIdx.x] = sc;
  }
}

void quant_rows_pow2_launch(const __nv_bfloat16* a, __nv_fp8_e4m3* aq, float* s, int M, int K, cudaStream_t st) {
  quant_rows_pow2<<<M, 128, 0, st>>>(a, aq, s, K, M);
}
