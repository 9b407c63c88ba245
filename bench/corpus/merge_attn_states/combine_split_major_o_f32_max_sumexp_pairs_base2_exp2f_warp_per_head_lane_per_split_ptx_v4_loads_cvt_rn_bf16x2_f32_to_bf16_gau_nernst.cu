// Combine of split-KV decode attention states as gau-nernst/learn-cuda lays them out (12_megakernel/attn_cuda_v1.cu,
// the Qwen3 decode megakernel; helpers from its common.h). The attention stage there leaves, per (split, head), an
// UNNORMALIZED fp32 output rescaled to that split's running max, attn_o [num_splits][num_heads][HEAD_DIM], and an
// interleaved (max_s, sum_exp) pair, attn_other [num_splits][num_heads][2], both split-major; the scores were
// pre-multiplied by log2(e) / sqrt(HEAD_DIM), so the max is in base 2 and every rescale is exp2f(max - new_max)
// (the file spells it __exp2f, which this toolkit does not declare).
// The file's own combine step is still a stub (its comment: splits per head stay under ~23, "unlikely that
// num_bids_per_head > WARP_SIZE"); this kernel writes that step in the file's style: one warp per head (NUM_WARPS
// heads per block of NUM_WARPS * 32 threads), lane s holds split s's (max_s, sum_exp) read with one 8-byte PTX load,
// xor butterflies for the max and for the rescaled sum, each lane then owns 4 consecutive columns (ld.global.v4.b32
// through ldg_b32<4>) and loops over the splits, taking split s's rescale from lane s by __shfl_sync; fp32
// accumulation, a single division by the total sum, cvt.rn.bf16x2.f32 packing and a 64-bit st.global.v2 store into
// out [num_heads][HEAD_DIM] bf16. Splits past num_splits contribute max -1e9 and sum 0, the file's convention (no
// -inf, so no -inf - -inf NaN). template <HEAD_DIM, NUM_WARPS> = <128, 4>; the launcher rejects num_splits > 32.
// Changed: the megakernel's grid-wide flags and workspace carving are left out, the state pointers are plain
// arguments, and the head axis also runs over a decode batch (num_heads = batch * 16) so a serving-sized merge
// exists. No bug found in what exists (the stage itself was missing). Sizes: 256 sequences x 16 heads over 32
// splits, the 16 heads of one sequence over 23 splits (the 188-SM case of its comment), 999 heads over 7 splits.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

constexpr int WARP_SIZE = 32;

__device__ inline
int fp32x2_to_bf16x2(float a, float b) {
  int tmp;
  asm volatile("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(tmp) : "f"(a), "f"(b));
  return tmp;
}

template <int VEC>
__device__ inline
void ldg_b32(void *data_, const void *ptr) {
  int *data = reinterpret_cast<int *>(data_);
  if constexpr (VEC == 1)
    asm volatile("ld.global.b32 %0, [%1];" : "=r"(data[0]) : "l"(ptr));
  if constexpr (VEC == 2)
    asm volatile("ld.global.v2.b32 {%0, %1}, [%2];" : "=r"(data[0]), "=r"(data[1]) : "l"(ptr));
  if constexpr (VEC == 4)
    asm volatile("ld.global.v4.b32 {%0, %1, %2, %3}, [%4];"
                : "=r"(data[0]), "=r"(data[1]), "=r"(data[2]), "=r"(data[3])
                : "l"(ptr));
}

template <int VEC>
__device__ inline
void stg_b32(void *ptr, const void *data_) {
  const int *data = reinterpret_cast<const int *>(data_);
  if constexpr (VEC == 1)
    asm volatile("st.global.b32 [%0], %1;" :: "l"(ptr), "r"(data[0]));
  if constexpr (VEC == 2)
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" :: "l"(ptr), "r"(data[0]), "r"(data[1]));
}

/* kerntune:
args  = ["attn_o_ptr: in f32[S * R * 128]", "attn_other_ptr: in f32[S * R * 2] ~ uniform(1, 12)",
         "out_ptr: out bf16[R * 128]", "num_heads: i32 = R", "num_splits: i32 = S"]
sizes = [{ R = 4096, S = 32 }, { R = 16, S = 23 }, { R = 999, S = 7 }]
grid  = "cdiv(R, 4)"
block = 128
template_args = ["128", "4"]
*/
template <int HEAD_DIM, int NUM_WARPS>
__global__
void combine_attn_states_kernel(
  const float *attn_o_ptr,      // fp32[num_splits][num_heads][HEAD_DIM], unnormalized
  const float *attn_other_ptr,  // fp32[num_splits][num_heads][2] = (max_s, sum_exp), base 2
  nv_bfloat16 *out_ptr,         // bf16[num_heads][HEAD_DIM]
  int num_heads,
  int num_splits
) {
  const int tid = threadIdx.x;
  const int warp_id = tid / WARP_SIZE;
  const int lane_id = tid % WARP_SIZE;
  const int head_id = blockIdx.x * NUM_WARPS + warp_id;
  if (head_id >= num_heads)
    return;  // the whole warp leaves together

  // lane s holds split s
  float max_s = -1e9f;
  float sum_exp = 0.0f;
  if (lane_id < num_splits) {
    float tmp[2];
    ldg_b32<2>(tmp, attn_other_ptr + (static_cast<long>(lane_id) * num_heads + head_id) * 2);
    max_s = tmp[0];
    sum_exp = tmp[1];
  }

  float new_max_s = max_s;
  for (int s = WARP_SIZE / 2; s > 0; s /= 2)
    new_max_s = max(new_max_s, __shfl_xor_sync(0xFFFF'FFFF, new_max_s, s));

  const float rescale = exp2f(max_s - new_max_s);  // 0 for the empty lanes
  sum_exp *= rescale;
  for (int s = WARP_SIZE / 2; s > 0; s /= 2)
    sum_exp += __shfl_xor_sync(0xFFFF'FFFF, sum_exp, s);
  const float inv_sum = 1.0f / sum_exp;

  // each lane owns 4 consecutive columns per pass
  static_assert(HEAD_DIM % (WARP_SIZE * 4) == 0);
  for (int i = 0; i < HEAD_DIM / (WARP_SIZE * 4); i++) {
    const int col = (i * WARP_SIZE + lane_id) * 4;
    float acc[4] = {};

    for (int split = 0; split < num_splits; split++) {
      const float r = __shfl_sync(0xFFFF'FFFF, rescale, split);
      float o[4];
      ldg_b32<4>(o, attn_o_ptr + ((static_cast<long>(split) * num_heads + head_id) * HEAD_DIM + col));
      for (int j = 0; j < 4; j++)
        acc[j] += o[j] * r;
    }

    int y[2];
    y[0] = fp32x2_to_bf16x2(acc[0] * inv_sum, acc[1] * inv_sum);
    y[1] = fp32x2_to_bf16x2(acc[2] * inv_sum, acc[3] * inv_sum);
    stg_b32<2>(out_ptr + (static_cast<long>(head_id) * HEAD_DIM + col), y);
  }
}

// The combine step of the split decode: one warp per head, 4 heads per 128-thread block.
int combine_attn_states(const float *attn_o, const float *attn_other, nv_bfloat16 *out, int num_heads,
                        int num_splits, cudaStream_t stream) {
  constexpr int HEAD_DIM = 128;
  constexpr int NUM_WARPS = 4;
  if (num_splits < 1 || num_splits > WARP_SIZE)
    return -1;  // one lane per split
  const int grid = (num_heads + NUM_WARPS - 1) / NUM_WARPS;
  combine_attn_states_kernel<HEAD_DIM, NUM_WARPS><<<grid, NUM_WARPS * WARP_SIZE, 0, stream>>>(
    attn_o, attn_other, out, num_heads, num_splits);
  return 0;
}
