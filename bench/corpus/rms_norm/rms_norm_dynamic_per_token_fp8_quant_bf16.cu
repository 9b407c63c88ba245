// RMSNorm fused with dynamic per-token FP8 quantization, with vLLM's rms_norm_dynamic_per_token_quant contract
// (the norm in front of an FP8 GEMM whose activation scales are computed per token at run time): input bf16
// [num_tokens, hidden_size], weight bf16 [hidden_size]; out fp8 e4m3 [num_tokens, hidden_size] and scales fp32
// [num_tokens], one per token:
//   inv_rms = rsqrt(mean(x^2) + eps)
//   y       = bf16(bf16(x * inv_rms) * weight)        (rounded to bf16 twice, as the unfused norm would store it)
//   scale   = max(min(max |y|, *scale_ub) / 448, 1 / (448 * 512))   (scale_ub nullable: an upper bound on the absmax)
//   out     = e4m3(clamp(y / scale, -448, 448))       (divided by the scale, not multiplied by its inverse)
// Three passes over the row in global memory (sum of squares; absmax of y; normalize and quantize), each block
// reduction a cub::BlockReduce<float, 1024> over the blockDim.x threads that exist, results handed over through
// __shared__ s_rms and s_token_scale by thread 0. One token per block, block = min(hidden_size, 1024), scalar
// accesses, template over the input and output types (instantiated <__nv_bfloat16, __nv_fp8_e4m3>).
// Tolerance: the fp8 bytes are compared as u8 (exact by default); a correct rewrite that sums the squares in
// another order moves inv_rms by an ulp, which moves a few values per million across a bf16 or fp8 rounding
// boundary, so atol is 1 (one fp8 code); the spec has one atol for all outputs, so the fp32 scales (below 1) are
// only loosely checked by it.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cub/block/block_reduce.cuh>
#include <algorithm>
#include <cstdint>

namespace quant {

constexpr float kFp8Max = 448.0f;
constexpr float kMinScalingFactor = 1.0f / (kFp8Max * 512.0f);

struct AddOp {
  __device__ __forceinline__ float operator()(const float a, const float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(const float a, const float b) const { return fmaxf(a, b); }
};

__device__ __forceinline__ __nv_fp8_e4m3 scaled_fp8_convert(const float x, const float scale) {
  const float r = fminf(fmaxf(x / scale, -kFp8Max), kFp8Max);
  __nv_fp8_e4m3 q;
  q.__x = __nv_cvt_float_to_fp8(r, __NV_SATFINITE, __NV_E4M3);
  return q;
}

/* kerntune:
args  = ["out: out u8[num_tokens * hidden_size]", "scales: out f32[num_tokens]",
         "input: in bf16[num_tokens * hidden_size]", "weight: in bf16[hidden_size]",
         "scale_ub: in f32[1] ~ uniform(6, 12)", "var_epsilon: f32 = 1e-6", "hidden_size: i32 = hidden_size"]
sizes = [{ num_tokens = 8192, hidden_size = 4096 }, { num_tokens = 8, hidden_size = 8192 },
         { num_tokens = 333, hidden_size = 2999 }]
grid  = "num_tokens"
block = "min(hidden_size, 1024)"
atol  = 1
template_args = ["__nv_bfloat16", "__nv_fp8_e4m3"]
*/
template <typename scalar_t, typename scalar_out_t>
__global__ void rms_norm_dynamic_per_token_quant_kernel(scalar_out_t* __restrict__ out, float* __restrict__ scales,
                                                        const scalar_t* __restrict__ input,
                                                        const scalar_t* __restrict__ weight,
                                                        const float* scale_ub, const float var_epsilon,
                                                        const int32_t hidden_size) {
  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduce_store;
  __shared__ float s_rms;
  __shared__ float s_token_scale;

  const int64_t token_offset = blockIdx.x * static_cast<int64_t>(hidden_size);

  // 1: the reciprocal RMS
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const float x = static_cast<float>(input[token_offset + i]);
    ss += x * x;
  }
  ss = BlockReduce(reduce_store).Reduce(ss, AddOp{}, blockDim.x);
  if (threadIdx.x == 0) {
    s_rms = rsqrtf(ss / hidden_size + var_epsilon);
  }
  __syncthreads();
  const float rms = s_rms;

  // 2: the token's scale from the absmax of the normalized row
  float absmax = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const float x = static_cast<float>(input[token_offset + i]);
    const float y = static_cast<float>(static_cast<scalar_t>(x * rms) * weight[i]);
    absmax = fmaxf(absmax, fabsf(y));
  }
  __syncthreads();  // reduce_store is reused
  absmax = BlockReduce(reduce_store).Reduce(absmax, MaxOp{}, blockDim.x);
  if (threadIdx.x == 0) {
    const float bounded = scale_ub != nullptr ? fminf(absmax, *scale_ub) : absmax;
    const float scale = fmaxf(bounded / kFp8Max, kMinScalingFactor);
    s_token_scale = scale;
    scales[blockIdx.x] = scale;
  }
  __syncthreads();
  const float token_scale = s_token_scale;

  // 3: normalize again and quantize
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const float x = static_cast<float>(input[token_offset + i]);
    const float y = static_cast<float>(static_cast<scalar_t>(x * rms) * weight[i]);
    out[token_offset + i] = scaled_fp8_convert(y, token_scale);
  }
}

}  // namespace quant

// out: [num_tokens, hidden_size] fp8 e4m3; scales: [num_tokens] fp32; input: [num_tokens, hidden_size] bf16;
// weight: [hidden_size] bf16; scale_ub: [1] fp32 or null. Device pointers.
void rms_norm_dynamic_per_token_quant(__nv_fp8_e4m3* out, float* scales, const __nv_bfloat16* input,
                                      const __nv_bfloat16* weight, const float* scale_ub, float var_epsilon,
                                      int64_t num_tokens, int32_t hidden_size, cudaStream_t stream) {
  if (num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(num_tokens));
  const dim3 block(std::min(hidden_size, 1024));
  quant::rms_norm_dynamic_per_token_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3>
      <<<grid, block, 0, stream>>>(out, scales, input, weight, scale_ub, var_epsilon, hidden_size);
}
