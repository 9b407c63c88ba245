// Split-K decode combine as Tencent hpc-ops writes it (Tencent/hpc-ops, a library of LLM inference operators for
// Hopper: src/attention/decode/smallm_splitk_combine_kernels.cuh,
// attention_decode_bf16_smallm_splitk_combine_kernel, the second kernel of its bf16 "small-m" paged decode attention
// with head_dim 128, kTileV = 128). The split kernel writes, per batch, kSplitK * kConsumers fp32 partial outputs
// and BASE-2 lse values (log2 of the sum of exp2(scores * log2e) plus the max), SPLIT-MAJOR: split_input [num_batch,
// kSplitK * kConsumers, num_head_q, 128] fp32, lse [num_batch, kSplitK * kConsumers, num_head_q] fp32; the output y
// [num_batch, num_head_q, 128] is bf16 (one query token per batch, kSeqlenQ = 1). How many chunks a batch really has
// is re-derived from its kv length (num_seq_kvcache [num_batch] int, minus the new token when new_kv_included):
// per-chunk length ceil(n / kSplitK) rounded up to kTileM, at least kSplitMinLen; a batch that was not split returns
// at once (the split kernel then wrote y itself). Combine: max over the chunks' lse, sum_lse = log2(sum exp2(lse -
// max)) + max, y = sum exp2(lse_c - sum_lse) * partial_c, fp32, one rounding to bf16 on the store; exp2 / log2 are
// the ex2.approx.ftz / lg2.approx.ftz PTX of hpc-ops' utils. Launch: a WARP PER Q-HEAD, each lane 4 consecutive
// floats of the 128 (a float4 load per chunk, 4 bf16 stored as 8 bytes); grid (num_batch, ceil(num_head_q * 32 /
// 1024)), block min(num_head_q * 32, 1024), so heads beyond 32 go to blockIdx.y and surplus warps return; the lse
// values live in a register array of kSplitK * kConsumers, loops fully unrolled. Template <T, kTileM, kTileV,
// kSplitK, kSplitMinLen, kConsumers>, instance <__nv_bfloat16, 16, 128, 4, 4096, 1>; argument order (y, split_input,
// lse, num_seq_kvcache, new_kv_included, num_head_q). Changed: cute's vec_t / load / store / to<T> written as float4
// and __nv_bfloat162; the host launcher (the real one is buried in the split-kernel dispatch) written as a plain
// function; the kernel's bool new_kv_included passed as an int (0 / 1) flag, the launcher keeps the bool. Fixed:
// max_lse started at 0.f, not -inf, so when every chunk's lse is below about -126 (base 2) all exp2 terms flushed to
// zero, sum_lse became -inf and the scales inf / NaN; it now starts at -INFINITY. Sizes: 512 batches x 64 heads
// (grid y 2), decode 4 x 32, 999 x 40 heads (the second head tile has 8 live warps); kv lengths randint(4096, 65536)
// so that every batch is split (2 to 4 chunks).
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <algorithm>

namespace hpc {
namespace attention {
namespace kernels {

__device__ __forceinline__ float exp2f_ftz(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float log2f_ftz(float x) {
  float y;
  asm volatile("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* kerntune:
args  = ["y_ptr: out bf16[B * Hq * 128]", "split_input_ptr: in f32[B * 4 * Hq * 128]",
         "lse_ptr: in f32[B * 4 * Hq] ~ uniform(-4, 12)", "num_seq_kvcache_ptr: in i32[B] ~ randint(4096, 65536)",
         "new_kv_included: i32 = 0", "num_head_q: i32 = Hq"]
sizes = [{ B = 512, Hq = 64 }, { B = 4, Hq = 32 }, { B = 999, Hq = 40 }]
grid  = ["B", "cdiv(Hq * 32, 1024)"]
block = "min(Hq * 32, 1024)"
template_args = ["__nv_bfloat16", "16", "128", "4", "4096", "1"]
*/
template <typename T, int kTileM, int kTileV, int kSplitK, int kSplitMinLen, int kConsumers>
__global__ void attention_decode_bf16_smallm_splitk_combine_kernel(
    T *y_ptr, const float *split_input_ptr, const float *lse_ptr, const int *num_seq_kvcache_ptr,
    int new_kv_included, int num_head_q) {
  int ibatch = blockIdx.x;
  // one warp per Q head; more than 32 heads are tiled along blockIdx.y (at most 1024 threads a block)
  int heads_per_block = blockDim.x / 32;
  int ihead = blockIdx.y * heads_per_block + threadIdx.x / 32;
  int ilane = threadIdx.x % 32;

  if (ihead >= num_head_q) {
    return;
  }

  constexpr int kItemsPerThread = 4;
  constexpr int kSeqlenQ = 1;
  static_assert(kTileV == 32 * kItemsPerThread, "a warp covers one head row");

  int icol = ilane * kItemsPerThread;
  int num_seq_kvcache = num_seq_kvcache_ptr[ibatch];
  if (new_kv_included) {
    num_seq_kvcache -= kSeqlenQ;
  }
  int num_seq_kv = kSeqlenQ + num_seq_kvcache;

  if (num_seq_kv <= 0) {
    return;
  }

  int num_seq_per_chunk = (num_seq_kv + kSplitK - 1) / kSplitK;
  num_seq_per_chunk = (num_seq_per_chunk + kTileM - 1) / kTileM * kTileM;
  num_seq_per_chunk = max(num_seq_per_chunk, kSplitMinLen);

  bool is_split = false;
  if (num_seq_per_chunk < num_seq_kv) {
    is_split = true;
  }

  if (!is_split && kConsumers == 1) {
    return;
  }

  constexpr int kSplitKConsumers = kSplitK * kConsumers;
  const float *lse_batch = lse_ptr + ibatch * kSplitKConsumers * num_head_q + ihead;
  const float *split_input =
      split_input_ptr + ibatch * kSplitKConsumers * num_head_q * kTileV + ihead * kTileV + icol;
  T *out_row = y_ptr + ibatch * num_head_q * kTileV + ihead * kTileV + icol;

  int num_chunks = kConsumers * ((num_seq_kv + num_seq_per_chunk - 1) / num_seq_per_chunk);

  float lse[kSplitKConsumers];
  float output[kItemsPerThread];
#pragma unroll
  for (int i = 0; i < kItemsPerThread; i++) {
    output[i] = 0.f;
  }
  float max_lse = -INFINITY;
  float sum_lse = 0.f;

#pragma unroll
  for (int ichunk = 0; ichunk < kSplitKConsumers; ichunk++) {
    if (ichunk < num_chunks) {
      lse[ichunk] = lse_batch[ichunk * num_head_q];
      max_lse = max(max_lse, lse[ichunk]);
    }
  }

#pragma unroll
  for (int ichunk = 0; ichunk < kSplitKConsumers; ichunk++) {
    if (ichunk < num_chunks) {
      sum_lse += exp2f_ftz(lse[ichunk] - max_lse);
    }
  }

  sum_lse = log2f_ftz(sum_lse) + max_lse;

#pragma unroll
  for (int ichunk = 0; ichunk < kSplitKConsumers; ichunk++) {
    if (ichunk < num_chunks) {
      float4 y = *reinterpret_cast<const float4 *>(split_input + ichunk * num_head_q * kTileV);
      float scale = exp2f_ftz(lse[ichunk] - sum_lse);
      output[0] += scale * y.x;
      output[1] += scale * y.y;
      output[2] += scale * y.z;
      output[3] += scale * y.w;
    }
  }

  __nv_bfloat162 packed[2];
  packed[0] = __floats2bfloat162_rn(output[0], output[1]);
  packed[1] = __floats2bfloat162_rn(output[2], output[3]);
  *reinterpret_cast<uint2 *>(out_row) = *reinterpret_cast<const uint2 *>(packed);
}

}  // namespace kernels

namespace decode {

// The combine launch of the bf16 head_dim-128 split-K decode path: y [num_batch, num_head_q, 128] bf16,
// splitk_out [num_batch, 4, num_head_q, 128] fp32 and lse [num_batch, 4, num_head_q] fp32 from the split kernel,
// num_seq_kvcache [num_batch] on the device.
void launch_attention_decode_bf16_dim128_splitk_combine(void *y_ptr, const void *splitk_out_ptr, const void *lse_ptr,
                                                       const int *num_seq_kvcache_ptr, bool new_kv_included,
                                                       int num_batch, int num_head_q, cudaStream_t stream) {
  constexpr int kTileM = 16;
  constexpr int kTileV = 128;
  constexpr int kSplitK = 4;
  constexpr int kSplitMinLen = 4096;
  constexpr int kConsumers = 1;

  const int num_threads = std::min(num_head_q * 32, 1024);
  const int heads_per_block = num_threads / 32;
  dim3 grid(num_batch, (num_head_q + heads_per_block - 1) / heads_per_block);
  dim3 block(num_threads);

  kernels::attention_decode_bf16_smallm_splitk_combine_kernel<__nv_bfloat16, kTileM, kTileV, kSplitK, kSplitMinLen,
                                                              kConsumers><<<grid, block, 0, stream>>>(
      reinterpret_cast<__nv_bfloat16 *>(y_ptr), reinterpret_cast<const float *>(splitk_out_ptr),
      reinterpret_cast<const float *>(lse_ptr), num_seq_kvcache_ptr, new_kv_included ? 1 : 0, num_head_q);
}

}  // namespace decode
}  // namespace attention
}  // namespace hpc
