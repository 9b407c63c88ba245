// Dynamic per-token fp8 quantization as vLLM's dynamic_per_token_scaled_fp8_quant_kernel_strided writes it: the
// output, the scales and the input first, then a nullable upper bound on the absmax (scale_ub, one fp32 on the
// device), the hidden size and the input and output row strides (int64); one token per block of min(hidden, 256);
// scale = max(min(absmax, *scale_ub) / 448, 1 / (448 * 512)) stored per token, the values divided by it, clamped to
// +-448 and converted with saturation.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

#define FP8_E4M3_MAX 448.0f

/* kerntune:
args  = ["out: out u8[num_tokens * hidden_size]", "scale: out f32[num_tokens]",
         "input: in bf16[num_tokens * hidden_size]", "scale_ub: in f32[1] ~ uniform(2, 6)",
         "hidden_size: i32 = hidden_size", "in_row_stride: i64 = hidden_size", "out_row_stride: i64 = hidden_size"]
sizes = [{ num_tokens = 4096, hidden_size = 8192 }, { num_tokens = 5, hidden_size = 5120 }]
grid  = "num_tokens"
block = "min(hidden_size, 256)"
*/
__global__ void dynamic_per_token_fp8_quant(__nv_fp8_e4m3* __restrict__ out, float* __restrict__ scale,
                                            const __nv_bfloat16* __restrict__ input,
                                            const float* __restrict__ scale_ub, const int hidden_size,
                                            const int64_t in_row_stride, const int64_t out_row_stride) {
  __shared__ float warp_max[8];
  __shared__ float token_scale;
  const int64_t token_idx = blockIdx.x;
  const int tid = threadIdx.x;
  const __nv_bfloat16* token_in = input + token_idx * in_row_stride;
  __nv_fp8_e4m3* token_out = out + token_idx * out_row_stride;

  float absmax_val = 0.f;
  for (int i = tid; i < hidden_size; i += blockDim.x) absmax_val = fmaxf(absmax_val, fabsf(__bfloat162float(token_in[i])));
  for (int o = 16; o > 0; o >>= 1) absmax_val = fmaxf(absmax_val, __shfl_down_sync(0xffffffffu, absmax_val, o));
  if ((tid & 31) == 0) warp_max[tid >> 5] = absmax_val;
  __syncthreads();
  if (tid == 0) {
    float block_max = warp_max[0];
    for (int w = 1; w < (int)(blockDim.x + 31) / 32; ++w) block_max = fmaxf(block_max, warp_max[w]);
    const float bounded = scale_ub ? fminf(block_max, *scale_ub) : block_max;
    token_scale = fmaxf(bounded / FP8_E4M3_MAX, 1.0f / (FP8_E4M3_MAX * 512.f));
    scale[token_idx] = token_scale;
  }
  __syncthreads();
  const float s = token_scale;
  for (int i = tid; i < hidden_size; i += blockDim.x) {
    const float x = fminf(fmaxf(__bfloat162float(token_in[i]) / s, -FP8_E4M3_MAX), FP8_E4M3_MAX);
    token_out[i] = __nv_fp8_e4m3(x);
  }
}

void dynamic_per_token_scaled_fp8_quant(__nv_fp8_e4m3* out, float* scale, const __nv_bfloat16* input,
                                        const float* scale_ub, int num_tokens, int hidden_size, cudaStream_t stream) {
  const int block = hidden_size < 256 ? hidden_size : 256;
  dynamic_per_token_fp8_quant<<<num_tokens, block, 0, stream>>>(out, scale, input, scale_ub, hidden_size, hidden_size,
                                                                hidden_size);
}
