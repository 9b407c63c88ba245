// The split-K reduce of LMDeploy TurboMind's decoding attention (src/turbomind/kernels/attention/reduce.cu):
// the attention kernel split each query's KV range into split_cnt[q] chunks and left, per (query, head, split),
//   partial_O  [query_num, head_num, max_split_cnt, HeadDim] fp32: sum_j exp2((s_j - M) * exp_scale) v_j,
//              UNNORMALIZED (not divided by L)
//   partial_ML [query_num, head_num, max_split_cnt, 2] fp32: interleaved (M, L) pairs, M the running max of the
//              RAW scores (q . k, before the softmax scale) and L the sum of exp2((s_j - M) * exp_scale)
// with exp_scale = softmax_scale * log2(e): TurboMind keeps scores unscaled and takes every exponential in base 2
// through that factor. The reduce:
//   M = max_k M_k,  L = sum_k exp2((M_k - M) * exp_scale) * L_k       (a split with M_k = -inf counts 0)
//   out[q, h, :] = T(sum_k exp2((M_k - M) * exp_scale) / L * partial_O[q, h, k, :])
// Only the first split_cnt[q] splits of a query are read (per-query split counts, nullable: 1). This file has
// the single-pass case max_split_cnt <= CTA_K = 32 (TurboMind runs further passes above that) and no context
// parallelism. Launch as TurboMind: grid (head_num, query_num) (the ReduceCtaMap: head on x, query on y),
// kWarpCnt = 4 warps of 128 threads; warp 0 holds one split per lane for the (M, L) statistics (xor-shuffle max
// and sum) and leaves the per-split scales in __shared__ s_scale[CTA_K]; then warp w accumulates splits w,
// w + 4, ... with each lane owning kVecSize = 4 (HeadDim % 128 == 0, else 2) consecutive channels per step, the
// 4 warp partials are summed by a halving tree in __shared__ s_out[kWarpCnt][HeadDim] and warp 0 stores fp16.
// template <int HeadDim, int WarpCnt, class T>, launcher template <int HeadDim, class T> instantiated per head
// dim; the launcher passes the kernel's shared footprint as DYNAMIC shared memory (kSmemSize) although the
// kernel's arrays are static, as TurboMind's launch does.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cmath>
#include <cstdint>

#define WARP_SIZE 32

namespace turbomind {
namespace attention {

constexpr int CTA_K = 32;  // splits per pass: one per lane of warp 0

/* kerntune:
args  = ["out: out f16[query_num * head_num * 128]",
         "partial_ML: in f32[query_num * head_num * max_split_cnt * 2] ~ uniform(1, 8)",
         "partial_O: in f32[query_num * head_num * max_split_cnt * 128]",
         "split_cnt_: in i32[query_num] ~ randint(1, max_split_cnt + 1)", "max_split_cnt: i32 = max_split_cnt",
         "query_num: i32 = query_num", "head_num: i32 = head_num", "exp_scale: f32 = 0.12751743"]
sizes = [{ query_num = 512, head_num = 32, max_split_cnt = 16 }, { query_num = 4, head_num = 32, max_split_cnt = 32 },
         { query_num = 37, head_num = 7, max_split_cnt = 13 }]
grid  = ["head_num", "query_num"]
block = 128
smem  = "4 * (4 * 128 + 32)"
bytes = "query_num * 4 + query_num * head_num * (128 * 2 + (max_split_cnt + 1) / 2 * (128 + 2) * 4)"
template_args = ["128", "4", "half"]
*/
template <int HeadDim, int WarpCnt, class T>
__global__ void reduce(T* out, const float* partial_ML, const float* partial_O, const int* split_cnt_,
                       int max_split_cnt, int query_num, int head_num, float exp_scale) {
  constexpr int kVecSize = HeadDim % 128 == 0 ? 4 : 2;  // 128, 256 -> 4; 64, 192 -> 2
  constexpr int kIterC = HeadDim / (WARP_SIZE * kVecSize);
  static_assert(HeadDim % (WARP_SIZE * kVecSize) == 0, "head dim must fill whole lanes");

  __shared__ float s_out[WarpCnt][HeadDim];
  __shared__ float s_scale[CTA_K];

  const int warp_id = threadIdx.x / WARP_SIZE;
  const int lane_id = threadIdx.x % WARP_SIZE;

  const int head_idx = blockIdx.x;
  const int query_idx = blockIdx.y;
  const int qh = query_idx * head_num + head_idx;

  const int split_cnt = (split_cnt_ != nullptr) ? split_cnt_[query_idx] : 1;

  const float kNegInf = -INFINITY;

  if (warp_id == 0) {
    // lane k: the statistics of split k
    float frag_M = kNegInf;
    float frag_L = 0.f;
    if (lane_id < split_cnt) {
      const float2 ml = *reinterpret_cast<const float2*>(&partial_ML[(qh * max_split_cnt + lane_id) * 2]);
      frag_M = ml.x;
      frag_L = ml.y;
    }

    float block_M = frag_M;
#pragma unroll
    for (int mask = WARP_SIZE / 2; mask >= 1; mask /= 2) {
      block_M = fmaxf(block_M, __shfl_xor_sync(uint32_t(-1), block_M, mask));
    }

    float block_L = frag_M == kNegInf ? 0.f : exp2f((frag_M - block_M) * exp_scale) * frag_L;
#pragma unroll
    for (int mask = WARP_SIZE / 2; mask >= 1; mask /= 2) {
      block_L += __shfl_xor_sync(uint32_t(-1), block_L, mask);
    }

    s_scale[lane_id] = frag_M == kNegInf ? 0.f : exp2f((frag_M - block_M) * exp_scale) / block_L;
  }

  __syncthreads();

  // warp w: splits w, w + WarpCnt, ...; lane: channels (c * WARP_SIZE + lane) * kVecSize + [0, kVecSize)
  float accu_O[kIterC][kVecSize] = {};

  for (int k = warp_id; k < split_cnt; k += WarpCnt) {
    const float scale = s_scale[k];
    const float* src = partial_O + (static_cast<int64_t>(qh) * max_split_cnt + k) * HeadDim;
#pragma unroll
    for (int c = 0; c < kIterC; ++c) {
      const int di = (c * WARP_SIZE + lane_id) * kVecSize;
      float frag_O[kVecSize];
      if constexpr (kVecSize == 4) {
        const float4 v = *reinterpret_cast<const float4*>(src + di);
        frag_O[0] = v.x, frag_O[1] = v.y, frag_O[2] = v.z, frag_O[3] = v.w;
      } else {
        const float2 v = *reinterpret_cast<const float2*>(src + di);
        frag_O[0] = v.x, frag_O[1] = v.y;
      }
#pragma unroll
      for (int i = 0; i < kVecSize; ++i) {
        accu_O[c][i] += frag_O[i] * scale;
      }
    }
  }

#pragma unroll
  for (int c = 0; c < kIterC; ++c) {
    const int di = (c * WARP_SIZE + lane_id) * kVecSize;
#pragma unroll
    for (int i = 0; i < kVecSize; ++i) {
      s_out[warp_id][di + i] = accu_O[c][i];
    }
  }

  // sum the warps' partials: a halving tree over warp slots
#pragma unroll
  for (int w = WarpCnt / 2; w > 0; w /= 2) {
    __syncthreads();
    if (warp_id < w) {
#pragma unroll
      for (int c = 0; c < kIterC; ++c) {
        const int di = (c * WARP_SIZE + lane_id) * kVecSize;
#pragma unroll
        for (int i = 0; i < kVecSize; ++i) {
          s_out[warp_id][di + i] += s_out[warp_id + w][di + i];
        }
      }
    }
  }

  // warp 0 made the last sums itself: no barrier before reading them back
  if (warp_id == 0) {
    T* dst = out + static_cast<int64_t>(qh) * HeadDim;
#pragma unroll
    for (int c = 0; c < kIterC; ++c) {
      const int di = (c * WARP_SIZE + lane_id) * kVecSize;
#pragma unroll
      for (int i = 0; i < kVecSize; ++i) {
        dst[di + i] = static_cast<T>(s_out[0][di + i]);
      }
    }
  }
}

// out [query_num, head_num, HeadDim]; partial_ML, partial_O as above; split_cnt [query_num] or nullptr;
// max_split_cnt <= 32; device pointers.
template <int HeadDim, class T>
void invokeReduce(T* out, const float* partial_ML, const float* partial_O, const int* split_cnt, int max_split_cnt,
                  int query_num, int head_num, float exp_scale, cudaStream_t stream) {
  constexpr int kWarpCnt = 4;
  constexpr size_t kSmemSize = sizeof(float) * (kWarpCnt * HeadDim + CTA_K);
  static_assert(kSmemSize < (48 << 10), "shared memory usage exceeds 48KB per block");

  if (max_split_cnt > CTA_K) {
    return;  // needs the multi-pass reduce
  }

  const dim3 block = kWarpCnt * WARP_SIZE;
  const dim3 grid(head_num, query_num);

  reduce<HeadDim, kWarpCnt><<<grid, block, kSmemSize, stream>>>(out, partial_ML, partial_O, split_cnt,
                                                                 max_split_cnt, query_num, head_num, exp_scale);
}

template void invokeReduce<64, half>(half*, const float*, const float*, const int*, int, int, int, float,
                                     cudaStream_t);
template void invokeReduce<128, half>(half*, const float*, const float*, const int*, int, int, int, float,
                                      cudaStream_t);
template void invokeReduce<256, half>(half*, const float*, const float*, const int*, int, int, int, float,
                                      cudaStream_t);

}  // namespace attention
}  // namespace turbomind
