// Per-token-group FP8 (e4m3) quantization for DeepGEMM-style block-scaled GEMMs: fp16 input, groups of group_size
// along the hidden dimension, power-of-two (UE8M0) scales 2^ceil(log2(absmax / 448)) stored column-major, i.e.
// scales[group_column][token] ([hidden / group_size, num_tokens]). One warp per group, 4 groups per block
// (kWarpsPerBlock), lanes striding the group, a full-warp xor reduction.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

constexpr int kWarpsPerBlock = 4;

/* kerntune:
args  = ["x: in f16[num_tokens * hidden]", "q: out u8[num_tokens * hidden]", "scales: out f32[hidden / 128 * num_tokens]",
         "num_tokens: i32 = num_tokens", "hidden: i32 = hidden", "group_size: i32 = 128", "eps: f32 = 1e-4"]
sizes = [{ num_tokens = 8192, hidden = 7168 }, { num_tokens = 32, hidden = 7168 }, { num_tokens = 1001, hidden = 1408 }]
grid  = "cdiv(num_tokens * (hidden / 128), 4)"
block = "128"
*/
__global__ void group_quant_fp8_colmajor_kernel(const __half* __restrict__ x, __nv_fp8_e4m3* __restrict__ q,
                                                float* __restrict__ scales, int num_tokens, int hidden,
                                                int group_size, float eps) {
  const int groups_per_row = hidden / group_size;
  const long long g = (long long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (g >= (long long)num_tokens * groups_per_row) return;  // uniform per warp
  const int lane = threadIdx.x % 32;
  const int token = (int)(g / groups_per_row);
  const int gcol = (int)(g % groups_per_row);
  const __half* src = x + g * group_size;
  __nv_fp8_e4m3* dst = q + g * group_size;

  float amax = 0.f;
  for (int i = lane; i < group_size; i += 32) amax = fmaxf(amax, fabsf(__half2float(src[i])));
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, off));

  const float scale = exp2f(ceilf(log2f(fmaxf(amax, eps) / 448.0f)));
  const float inv_scale = 1.0f / scale;  // exact: scale is a power of two
  for (int i = lane; i < group_size; i += 32) dst[i] = __nv_fp8_e4m3(__half2float(src[i]) * inv_scale);
  if (lane == 0) scales[(size_t)gcol * num_tokens + token] = scale;
}

void group_quant_fp8_colmajor(const __half* x, __nv_fp8_e4m3* q, float* scales, int num_tokens, int hidden,
                              int group_size, float eps, cudaStream_t stream) {
  const long long num_groups = (long long)num_tokens * (hidden / group_size);
  const int threads = kWarpsPerBlock * 32;
  const int blocks = (int)((num_groups + kWarpsPerBlock - 1) / kWarpsPerBlock);
  group_quant_fp8_colmajor_kernel<<<blocks, threads, 0, stream>>>(x, q, scales, num_tokens, hidden, group_size, eps);
}
