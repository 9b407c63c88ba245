// In-place merge of an attention state with another (bf16 values, fp32 base-2 log-sum-exps laid out
// [seq_len, num_heads]) in the style of FlashInfer's MergeStateInPlaceKernel: v and s are updated in place, and an
// optional per-position mask skips positions. Scalar; one warp per (position, head) and 4 heads per block
// (block (32, 4), grid (seq_len, ceil(num_heads / 4))).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["v: inout bf16[seq_len * num_heads * head_dim]", "s: inout f32[seq_len * num_heads] ~ uniform(-4, 12)",
         "v_other: in bf16[seq_len * num_heads * head_dim]",
         "s_other: in f32[seq_len * num_heads] ~ uniform(-4, 12)", "mask: in u8[seq_len] ~ randint(0, 2)",
         "num_heads: u32 = num_heads", "head_dim: u32 = head_dim"]
sizes = [{ seq_len = 4096, num_heads = 64, head_dim = 128 }, { seq_len = 64, num_heads = 32, head_dim = 128 },
         { seq_len = 999, num_heads = 14, head_dim = 64 }]
grid  = ["seq_len", "cdiv(num_heads, 4)"]
block = [32, 4]
*/
__global__ void MergeStateInPlaceKernel(__nv_bfloat16* __restrict__ v, float* __restrict__ s,
                                        const __nv_bfloat16* __restrict__ v_other,
                                        const float* __restrict__ s_other, const uint8_t* __restrict__ mask,
                                        uint32_t num_heads, uint32_t head_dim) {
  const uint32_t pos = blockIdx.x;
  if (mask != nullptr && mask[pos] == 0) return;
  const uint32_t head_idx = blockIdx.y * blockDim.y + threadIdx.y;
  if (head_idx >= num_heads) return;
  const uint32_t tx = threadIdx.x;

  const size_t sidx = (size_t)pos * num_heads + head_idx;
  float s_val = s[sidx];
  float s_other_val = s_other[sidx];
  const float s_max = fmaxf(s_val, s_other_val);
  s_val = exp2f(s_val - s_max);
  s_other_val = exp2f(s_other_val - s_max);
  const float scale = s_val / (s_val + s_other_val);
  const float other_scale = s_other_val / (s_val + s_other_val);

  const size_t offset = sidx * head_dim;
  for (uint32_t d = tx; d < head_dim; d += 32) {
    const float a = __bfloat162float(v[offset + d]);
    const float b = __bfloat162float(v_other[offset + d]);
    v[offset + d] = __float2bfloat16(scale * a + other_scale * b);
  }
  __syncwarp();  // every lane has read s[sidx] before lane 0 replaces it
  if (tx == 0) s[sidx] = log2f(s_val + s_other_val) + s_max;
}

cudaError_t MergeStateInPlace(__nv_bfloat16* v, float* s, const __nv_bfloat16* v_other, const float* s_other,
                              const uint8_t* mask, uint32_t seq_len, uint32_t num_heads, uint32_t head_dim,
                              cudaStream_t stream) {
  constexpr uint32_t heads_per_block = 4;
  dim3 nblks(seq_len, (num_heads + heads_per_block - 1) / heads_per_block);
  dim3 nthrs(32, heads_per_block);
  MergeStateInPlaceKernel<<<nblks, nthrs, 0, stream>>>(v, s, v_other, s_other, mask, num_heads, head_dim);
  return cudaGetLastError();
}
