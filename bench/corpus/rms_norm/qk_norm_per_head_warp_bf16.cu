// Per-head RMSNorm of the query (the "QK norm" of Qwen3 and OLMo2, as SGLang and vLLM apply q_norm to q viewed
// as [tokens, num_heads, head_dim]): every (token, head) row of head_dim elements is normalized in place with one
// weight of head_dim entries shared by all heads. The head size is a template parameter picked by a host switch
// (64, 128, 256); one warp per row, 4 warps in a 1-D block of 128 threads (warp = threadIdx.x / 32), the row count
// tokens * num_heads an argument. Each lane keeps its kHeadDim / 32 elements in registers as __nv_bfloat162 pairs
// (pair i * 32 + lane, so each step of the warp reads 128 contiguous bytes), the sum of squares is a
// __shfl_xor_sync butterfly, x * rsqrtf(mean + eps) is computed in fp32 and rounded to bf16, and the weight is
// then applied by a bf16 multiply (__hmul2), the order of Hugging Face's Qwen3RMSNorm (weight * x.to(bf16)).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace qk_norm {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;
constexpr int kBlockThreads = kWarpsPerBlock * kWarpSize;

/* kerntune:
args  = ["x: inout bf16[tokens * num_heads * head_dim]", "weight: in bf16[head_dim]",
         "num_rows: i32 = tokens * num_heads", "eps: f32 = 1e-6"]
sizes = [{ tokens = 16384, num_heads = 32, head_dim = 128 }, { tokens = 4, num_heads = 32, head_dim = 128 },
         { tokens = 1003, num_heads = 5, head_dim = 128 }]
grid  = "cdiv(tokens * num_heads, 4)"
block = 128
template_args = ["128"]
*/
template <int kHeadDim>
__global__ void per_head_rms_norm_kernel(__nv_bfloat16* __restrict__ x,             // [num_rows, kHeadDim]
                                         const __nv_bfloat16* __restrict__ weight,  // [kHeadDim]
                                         const int num_rows, const float eps) {
  static_assert(kHeadDim % (2 * kWarpSize) == 0, "a lane holds whole bf16 pairs");
  constexpr int kPairsPerLane = kHeadDim / (2 * kWarpSize);

  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kWarpsPerBlock + warp;
  if (row >= num_rows) return;  // the whole warp leaves; nothing below synchronizes the block

  __nv_bfloat162* x2 = reinterpret_cast<__nv_bfloat162*>(x + static_cast<int64_t>(row) * kHeadDim);
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(weight);

  float2 v[kPairsPerLane];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kPairsPerLane; ++i) {
    v[i] = __bfloat1622float2(x2[i * kWarpSize + lane]);
    sum_sq += v[i].x * v[i].x + v[i].y * v[i].y;
  }
#pragma unroll
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, mask);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(kHeadDim) + eps);

#pragma unroll
  for (int i = 0; i < kPairsPerLane; ++i) {
    const int p = i * kWarpSize + lane;
    const __nv_bfloat162 normed = __floats2bfloat162_rn(v[i].x * inv_rms, v[i].y * inv_rms);
    x2[p] = __hmul2(normed, w2[p]);
  }
}

template <int kHeadDim>
static void launch_per_head_rms_norm(__nv_bfloat16* x, const __nv_bfloat16* weight, int num_rows, float eps,
                                     cudaStream_t stream) {
  const dim3 grid((num_rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const dim3 block(kBlockThreads);
  per_head_rms_norm_kernel<kHeadDim><<<grid, block, 0, stream>>>(x, weight, num_rows, eps);
}

}  // namespace qk_norm

// q: [num_tokens, num_heads, head_dim] contiguous, normalized in place; q_weight: [head_dim].
// Supported head sizes: 64, 128, 256 (others are rejected by the caller before this point).
void qk_norm_per_head(__nv_bfloat16* q, const __nv_bfloat16* q_weight, int64_t num_tokens, int num_heads,
                      int head_dim, float eps, cudaStream_t stream) {
  const int num_rows = static_cast<int>(num_tokens * num_heads);
  if (num_rows == 0) return;
  switch (head_dim) {
    case 64:
      qk_norm::launch_per_head_rms_norm<64>(q, q_weight, num_rows, eps, stream);
      break;
    case 128:
      qk_norm::launch_per_head_rms_norm<128>(q, q_weight, num_rows, eps, stream);
      break;
    case 256:
      qk_norm::launch_per_head_rms_norm<256>(q, q_weight, num_rows, eps, stream);
      break;
    default:
      break;
  }
}
