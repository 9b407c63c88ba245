// Merge of any number of partial attention states per position (FlashInfer's MergeStates contract, the cascade /
// split-KV reduction over num_index_sets KV chunks): v [seq_len, num_index_sets, num_heads, head_dim] fp16 with the
// index sets between the position and the heads, s [seq_len, num_index_sets, num_heads] fp32 log-sum-exp in BASE 2,
// merged into v_merged [seq_len, num_heads, head_dim] fp16 and s_merged [seq_len, num_heads] (nullable):
//   m = max_k s_k,  w_k = 2^(s_k - m),  v_merged = sum_k w_k v_k / sum_k w_k,  s_merged = m + log2(sum_k w_k)
// computed online over the index sets (running max, denominator rescaled by exp2f on every new maximum); a state
// with s = -inf contributes nothing, a position with no state left gives zeros and -inf.
// Launch: a warp per (position, head), 4 heads per block: block (32, 4), grid (seq_len, ceil(num_heads / 4)). Each
// lane owns 4 consecutive channels at a time (an 8-byte uint2 load of four halves, head_dim a multiple of 4) and
// loops over them with a stride of 128 channels, redoing the online merge of the index sets for each chunk (the
// lse values are re-read for every chunk). uint32_t sizes, template over the input and output types
// (spec = <__half, __half>), fp32 math, one rounding; lane 0 writes s_merged.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cmath>

namespace cascade {

constexpr uint32_t kHeadsPerBlock = 4;
constexpr uint32_t kChunk = 4;  // channels per lane per step

/* kerntune:
args  = ["v: in f16[seq_len * num_index_sets * num_heads * head_dim]",
         "s: in f32[seq_len * num_index_sets * num_heads] ~ uniform(-4, 12)",
         "v_merged: out f16[seq_len * num_heads * head_dim]", "s_merged: out f32[seq_len * num_heads]",
         "num_index_sets: u32 = num_index_sets", "num_heads: u32 = num_heads", "head_dim: u32 = head_dim"]
sizes = [{ seq_len = 2048, num_index_sets = 4, num_heads = 32, head_dim = 128 },
         { seq_len = 8, num_index_sets = 16, num_heads = 32, head_dim = 128 },
         { seq_len = 333, num_index_sets = 3, num_heads = 7, head_dim = 80 }]
grid  = ["seq_len", "cdiv(num_heads, 4)"]
block = [32, 4]
template_args = ["__half", "__half"]
*/
template <typename DTypeIn, typename DTypeO>
__global__ void MergeStatesKernel(const DTypeIn* __restrict__ v, const float* __restrict__ s,
                                  DTypeO* __restrict__ v_merged, float* __restrict__ s_merged,
                                  uint32_t num_index_sets, uint32_t num_heads, uint32_t head_dim) {
  const uint32_t pos = blockIdx.x;
  const uint32_t head = blockIdx.y * kHeadsPerBlock + threadIdx.y;
  const uint32_t lane = threadIdx.x;
  if (head >= num_heads) return;  // the whole warp: no block-wide barrier follows

  float m = -INFINITY, d = 0.0f;
  for (uint32_t c = lane * kChunk; c < head_dim; c += 32 * kChunk) {
    float o[kChunk] = {0.0f, 0.0f, 0.0f, 0.0f};
    m = -INFINITY;
    d = 0.0f;
    for (uint32_t k = 0; k < num_index_sets; ++k) {
      const uint64_t state = (static_cast<uint64_t>(pos) * num_index_sets + k) * num_heads + head;
      const float s_k = s[state];
      if (s_k == -INFINITY) continue;
      const uint2 raw = *reinterpret_cast<const uint2*>(v + state * head_dim + c);
      const float2 v01 = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
      const float2 v23 = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
      const float m_new = fmaxf(m, s_k);
      const float scale_prev = exp2f(m - m_new);
      const float scale_k = exp2f(s_k - m_new);
      d = d * scale_prev + scale_k;
      o[0] = o[0] * scale_prev + v01.x * scale_k;
      o[1] = o[1] * scale_prev + v01.y * scale_k;
      o[2] = o[2] * scale_prev + v23.x * scale_k;
      o[3] = o[3] * scale_prev + v23.y * scale_k;
      m = m_new;
    }
    const float inv_d = d > 0.0f ? 1.0f / d : 0.0f;
    const uint64_t out = (static_cast<uint64_t>(pos) * num_heads + head) * head_dim + c;
    uint2 packed;
    *reinterpret_cast<__half2*>(&packed.x) = __floats2half2_rn(o[0] * inv_d, o[1] * inv_d);
    *reinterpret_cast<__half2*>(&packed.y) = __floats2half2_rn(o[2] * inv_d, o[3] * inv_d);
    *reinterpret_cast<uint2*>(v_merged + out) = packed;
  }
  // (m, d) depend on the lse values only, so lane 0's from its last chunk are the state's
  if (s_merged != nullptr && lane == 0) {
    s_merged[static_cast<uint64_t>(pos) * num_heads + head] = d > 0.0f ? m + log2f(d) : -INFINITY;
  }
}

// v: [seq_len, num_index_sets, num_heads, head_dim]; s: [seq_len, num_index_sets, num_heads] (base-2 lse);
// v_merged: [seq_len, num_heads, head_dim]; s_merged (or null): [seq_len, num_heads]. Device pointers, 8-byte
// aligned; head_dim a multiple of 4.
template <typename DTypeIn, typename DTypeO>
cudaError_t MergeStates(DTypeIn* v, float* s, DTypeO* v_merged, float* s_merged, uint32_t num_index_sets,
                        uint32_t seq_len, uint32_t num_heads, uint32_t head_dim, cudaStream_t stream = nullptr) {
  if (head_dim % kChunk != 0) return cudaErrorInvalidValue;
  if (seq_len == 0 || num_heads == 0) return cudaSuccess;
  const dim3 nblks(seq_len, (num_heads + kHeadsPerBlock - 1) / kHeadsPerBlock);
  const dim3 nthrs(32, kHeadsPerBlock);
  MergeStatesKernel<DTypeIn, DTypeO>
      <<<nblks, nthrs, 0, stream>>>(v, s, v_merged, s_merged, num_index_sets, num_heads, head_dim);
  return cudaGetLastError();
}

template cudaError_t MergeStates<__half, __half>(__half*, float*, __half*, float*, uint32_t, uint32_t, uint32_t,
                                                 uint32_t, cudaStream_t);

}  // namespace cascade
