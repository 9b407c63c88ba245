// Split-KV combine as FlashAttention-2 writes it (csrc/flash_attn/src/flash_fwd_kernel.h, combine_attn_seqk_parallel
// inside flash_fwd_splitkv_combine_kernel, launched by run_mha_fwd_splitkv_dispatch after the split-KV pass),
// N-way, bf16 output, the varlen (unpadded_lse) path:
//   oaccum    [num_splits, b, h, seqlen_q, d_rounded] fp32, each split's NORMALIZED partial output, split-major
//   lseaccum  [num_splits, b, h, seqlen_q] fp32, natural-log lse of each split
//   lse_out   = log(sum_s exp(lse_s - max)) + max   (max = 0 when every lse is -inf; +inf when the sum is 0 or NaN),
//               written to [h, b * seqlen_q] (unpadded_lse: the remapped layout (1, seqlen_q * b, seqlen_q) over
//               (q, head, batch)) or to [b, h, seqlen_q] (padded)
//   o         = bf16(sum_s exp(lse_s - lse_out) * oaccum_s)  into o[b, q, h, :] by o_batch / o_row / o_head strides
// FA2's conventions: kBlockM rows (b, h, q flattened) per block of kNThreads = 128, kBlockM from the head dim
// (4 for 128), grid = cdiv(b * h * seqlen_q, kBlockM); the lses of the block read into __shared__ ElementAccum
// sLSE[kMaxSplits][kBlockM + 1] (padded against bank conflicts) and read back TRANSPOSED so that
// kRowsPerLoadTranspose = min(kNThreads / kBlockM, kMaxSplits) lanes hold one row's splits, reduced by the
// recursive Allreduce<THREADS> xor-shuffle template with MaxOp / SumOp functors, the per-split scales
// exp(lse - lse_logsum) written back over sLSE; then each thread accumulates 4 consecutive floats of a row
// (kBlockN = kNThreads / kBlockM threads per row) over the splits, the rows past b * h * seqlen_q predicated off;
// template <Kernel_traits, kBlockM, Log_max_splits, Is_even_K> with Log_max_splits from a num_splits if-chain
// (spec: 17..32 splits, Log_max_splits = 5) and Is_even_K from d == kHeadDim. FA2 expresses the tiles in CuTe
// (make_tensor, tiled copies, identity-tensor predicates); written here with the same tiles in plain indexing. The
// Flash_fwd_params struct passed by value is unpacked into the fields the combine reads. The padded-lse store keeps
// FA2's missing row guard (right only when b * h * seqlen_q is a multiple of kBlockM; not the spec's path).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <math_constants.h>
#include <algorithm>
#include <cstdint>

namespace flash {

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, typename elem_type = __nv_bfloat16>
struct Flash_fwd_kernel_traits {
  using Element = elem_type;
  using ElementAccum = float;
  using index_t = int64_t;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kHeadDim = kHeadDim_;
};

template <typename T>
struct MaxOp {
  __device__ __forceinline__ T operator()(T const& x, T const& y) { return x > y ? x : y; }
};

template <>
struct MaxOp<float> {
  // This is slightly faster
  __device__ __forceinline__ float operator()(float const& x, float const& y) { return max(x, y); }
};

template <typename T>
struct SumOp {
  __device__ __forceinline__ T operator()(T const& x, T const& y) { return x + y; }
};

template <int THREADS>
struct Allreduce {
  static_assert(THREADS == 32 || THREADS == 16 || THREADS == 8 || THREADS == 4);
  template <typename T, typename Operator>
  static __device__ __forceinline__ T run(T x, Operator& op) {
    constexpr int OFFSET = THREADS / 2;
    x = op(x, __shfl_xor_sync(uint32_t(-1), x, OFFSET));
    return Allreduce<OFFSET>::run(x, op);
  }
};

template <>
struct Allreduce<2> {
  template <typename T, typename Operator>
  static __device__ __forceinline__ T run(T x, Operator& op) {
    x = op(x, __shfl_xor_sync(uint32_t(-1), x, 1));
    return x;
  }
};

/* kerntune:
args  = ["oaccum_ptr: in f32[num_splits * b * h * seqlen_q * 128]",
         "softmax_lseaccum_ptr: in f32[num_splits * b * h * seqlen_q] ~ uniform(-4, 12)",
         "o_ptr: out bf16[b * seqlen_q * h * 128]", "softmax_lse_ptr: out f32[b * h * seqlen_q]",
         "b: i32 = b", "h: i32 = h", "seqlen_q: i32 = seqlen_q", "d: i32 = 128", "d_rounded: i32 = 128",
         "num_splits: i32 = num_splits", "o_batch_stride: i64 = seqlen_q * h * 128", "o_row_stride: i64 = h * 128",
         "o_head_stride: i64 = 128", "unpadded_lse: u8 = 1", "seqlenq_ngroups_swapped: u8 = 0"]
sizes = [{ b = 64, h = 32, seqlen_q = 4, num_splits = 24 }, { b = 1, h = 32, seqlen_q = 1, num_splits = 32 },
         { b = 3, h = 7, seqlen_q = 1, num_splits = 17 }]
grid  = "cdiv(b * h * seqlen_q, 4)"
block = 128
template_args = ["flash::Flash_fwd_kernel_traits<128, 64, 64, 4, __nv_bfloat16>", "4", "5", "true"]
*/
template <typename Kernel_traits, int kBlockM, int Log_max_splits, bool Is_even_K>
__global__ void flash_fwd_splitkv_combine_kernel(const float* oaccum_ptr, const float* softmax_lseaccum_ptr,
                                                 typename Kernel_traits::Element* o_ptr, float* softmax_lse_ptr,
                                                 const int b, const int h, const int seqlen_q, const int d,
                                                 const int d_rounded, const int num_splits,
                                                 const typename Kernel_traits::index_t o_batch_stride,
                                                 const typename Kernel_traits::index_t o_row_stride,
                                                 const typename Kernel_traits::index_t o_head_stride,
                                                 const bool unpadded_lse, const bool seqlenq_ngroups_swapped) {
  using Element = typename Kernel_traits::Element;
  using ElementAccum = typename Kernel_traits::ElementAccum;
  using index_t = typename Kernel_traits::index_t;
  constexpr int kMaxSplits = 1 << Log_max_splits;
  constexpr int kHeadDim = Kernel_traits::kHeadDim;
  constexpr int kNThreads = Kernel_traits::kNThreads;

  static_assert(kMaxSplits <= 128, "kMaxSplits must be <= 128");
  static_assert(kBlockM == 4 || kBlockM == 8 || kBlockM == 16 || kBlockM == 32, "kBlockM must be 4, 8, 16 or 32");
  static_assert(kNThreads == 128, "We assume that each block has 128 threads");

  // kBlockM + 1 instead of kBlockM to reduce bank conflicts.
  __shared__ ElementAccum sLSE[kMaxSplits][kBlockM + 1];

  const int tidx = threadIdx.x;
  const int bidx = blockIdx.x;

  const index_t lse_size = (index_t)b * h * seqlen_q;
  const index_t row_offset_lse = (index_t)bidx * kBlockM;
  // gLSEaccum: (kMaxSplits, kBlockM) with strides (lse_size, 1)
  const ElementAccum* gLSEaccum = softmax_lseaccum_ptr + row_offset_lse;
  // gLSE (padded): kBlockM consecutive entries
  ElementAccum* gLSE = softmax_lse_ptr + row_offset_lse;

  constexpr int kNLsePerThread = (kMaxSplits * kBlockM + kNThreads - 1) / kNThreads;

  // Read the LSE values from gmem and store them in shared memory, then transpose them.
  constexpr int kRowsPerLoadLSE = kNThreads / kBlockM;
#pragma unroll
  for (int l = 0; l < kNLsePerThread; ++l) {
    const int row = l * kRowsPerLoadLSE + tidx / kBlockM;
    const int col = tidx % kBlockM;
    ElementAccum lse = (row < num_splits && col < lse_size - bidx * kBlockM) ? gLSEaccum[row * lse_size + col]
                                                                            : -CUDART_INF_F;
    if (row < kMaxSplits) {
      sLSE[row][col] = lse;
    }
  }
  __syncthreads();
  ElementAccum lse_accum[kNLsePerThread];
  // std::min in FA2, which builds with --expt-relaxed-constexpr; the corpus builds without it
  constexpr int kRowsPerLoadTranspose = kRowsPerLoadLSE < kMaxSplits ? kRowsPerLoadLSE : kMaxSplits;
  static_assert(kRowsPerLoadTranspose <= 32);
  static_assert(kNLsePerThread * kRowsPerLoadTranspose <= kMaxSplits);
#pragma unroll
  for (int l = 0; l < kNLsePerThread; ++l) {
    const int row = l * kRowsPerLoadTranspose + tidx % kRowsPerLoadTranspose;
    const int col = tidx / kRowsPerLoadTranspose;
    lse_accum[l] = (row < kMaxSplits && col < kBlockM) ? sLSE[row][col] : -CUDART_INF_F;
  }

  // The logsumexp of the LSEs along the split dimension.
  ElementAccum lse_max = lse_accum[0];
#pragma unroll
  for (int l = 1; l < kNLsePerThread; ++l) {
    lse_max = max(lse_max, lse_accum[l]);
  }
  MaxOp<float> max_op;
  lse_max = Allreduce<kRowsPerLoadTranspose>::run(lse_max, max_op);
  lse_max = lse_max == -CUDART_INF_F ? 0.0f : lse_max;  // In case all local LSEs are -inf
  float lse_sum = expf(lse_accum[0] - lse_max);
#pragma unroll
  for (int l = 1; l < kNLsePerThread; ++l) {
    lse_sum += expf(lse_accum[l] - lse_max);
  }
  SumOp<float> sum_op;
  lse_sum = Allreduce<kRowsPerLoadTranspose>::run(lse_sum, sum_op);
  // All local LSEs -inf: lse_logsum is +inf (not log(0) = -inf, which would give NaN below).
  ElementAccum lse_logsum = (lse_sum == 0.f || lse_sum != lse_sum) ? CUDART_INF_F : logf(lse_sum) + lse_max;
  if (tidx % kRowsPerLoadTranspose == 0 && tidx / kRowsPerLoadTranspose < kBlockM) {
    if (unpadded_lse) {
      const index_t lse_offset = row_offset_lse + tidx / kRowsPerLoadTranspose;
      if (lse_offset < lse_size) {
        // flat (b, h, q) -> (q, head, batch) -> remapped strides
        const index_t q_idx = lse_offset % seqlen_q;
        const index_t head_idx = (lse_offset / seqlen_q) % h;
        const index_t batch_idx = lse_offset / ((index_t)seqlen_q * h);
        const index_t remapped =
            seqlenq_ngroups_swapped
                ? q_idx * b + head_idx * ((index_t)seqlen_q * b) + batch_idx
                : q_idx + head_idx * ((index_t)seqlen_q * b) + batch_idx * seqlen_q;
        softmax_lse_ptr[remapped] = lse_logsum;
      }
    } else {
      gLSE[tidx / kRowsPerLoadTranspose] = lse_logsum;
    }
  }
  // Store the scales exp(lse - lse_logsum) in shared memory.
#pragma unroll
  for (int l = 0; l < kNLsePerThread; ++l) {
    const int row = l * kRowsPerLoadTranspose + tidx % kRowsPerLoadTranspose;
    const int col = tidx / kRowsPerLoadTranspose;
    if (row < num_splits && col < kBlockM) {
      sLSE[row][col] = expf(lse_accum[l] - lse_logsum);
    }
  }
  __syncthreads();

  // Oaccum tile (kBlockM, kHeadDim), row stride kHeadDim, one split after another d_rounded-strided.
  const index_t row_offset_oaccum = (index_t)bidx * kBlockM * d_rounded;
  const float* gOaccum = oaccum_ptr + row_offset_oaccum;
  constexpr int kBlockN = kNThreads / kBlockM;  // threads along a row, 4 floats each
  constexpr int kVals = 4;
  constexpr int kIters = kHeadDim / (kBlockN * kVals);
  static_assert(kHeadDim % (kBlockN * kVals) == 0, "");
  const int thr_row = tidx / kBlockN;
  const int thr_col = (tidx % kBlockN) * kVals;
  const int max_MN = (int)(lse_size - (index_t)bidx * kBlockM);

  ElementAccum tOrO[kIters][kVals];
  bool tOpOaccum[kIters];
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    tOpOaccum[k] = Is_even_K || (thr_col + k * kBlockN * kVals) < d;
#pragma unroll
    for (int i = 0; i < kVals; ++i) {
      tOrO[k][i] = 0.f;
    }
  }

  // Load Oaccum, scale and accumulate to O
  for (int split = 0; split < num_splits; ++split) {
    const ElementAccum lse_scale = sLSE[split][thr_row];
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (thr_row < max_MN && tOpOaccum[k]) {
        v = *reinterpret_cast<const float4*>(gOaccum + thr_row * kHeadDim + thr_col + k * kBlockN * kVals);
      }
      tOrO[k][0] += lse_scale * v.x;
      tOrO[k][1] += lse_scale * v.y;
      tOrO[k][2] += lse_scale * v.z;
      tOrO[k][3] += lse_scale * v.w;
    }
    gOaccum += lse_size * d_rounded;
  }

  // Write to gO
  const index_t idx = (index_t)bidx * kBlockM + thr_row;
  if (idx < lse_size) {
    const index_t batch_idx = idx / ((index_t)h * seqlen_q);
    const index_t head_idx = (idx - batch_idx * ((index_t)h * seqlen_q)) / seqlen_q;
    // The index to the rows of Q
    const index_t row = idx - batch_idx * ((index_t)h * seqlen_q) - head_idx * seqlen_q;
    Element* o_row = o_ptr + batch_idx * o_batch_stride + head_idx * o_head_stride + row * o_row_stride;
#pragma unroll
    for (int k = 0; k < kIters; ++k) {
      if (Is_even_K || tOpOaccum[k]) {
        const int col = thr_col + k * kBlockN * kVals;
#pragma unroll
        for (int i = 0; i < kVals; ++i) {
          o_row[col + i] = static_cast<Element>(tOrO[k][i]);
        }
      }
    }
  }
}

}  // namespace flash

// The fields of Flash_fwd_params the combine reads.
struct Flash_fwd_params {
  using index_t = int64_t;
  void* oaccum_ptr;
  void* softmax_lseaccum_ptr;
  void* o_ptr;
  void* softmax_lse_ptr;
  int b, h, seqlen_q, d, d_rounded;
  int num_splits;
  index_t o_batch_stride, o_row_stride, o_head_stride;
  bool unpadded_lse;
  bool seqlenq_ngroups_swapped;
};

#define LAUNCH_COMBINE(LOG_MAX_SPLITS)                                                                          \
  flash::flash_fwd_splitkv_combine_kernel<Kernel_traits, kBlockM, LOG_MAX_SPLITS, IsEvenKConst>                 \
      <<<grid_combine, Kernel_traits::kNThreads, 0, stream>>>(                                                  \
          static_cast<const float*>(params.oaccum_ptr), static_cast<const float*>(params.softmax_lseaccum_ptr), \
          static_cast<typename Kernel_traits::Element*>(params.o_ptr), static_cast<float*>(params.softmax_lse_ptr), \
          params.b, params.h, params.seqlen_q, params.d, params.d_rounded, params.num_splits,                   \
          params.o_batch_stride, params.o_row_stride, params.o_head_stride, params.unpadded_lse,                \
          params.seqlenq_ngroups_swapped)

// The combine half of run_mha_fwd_splitkv_dispatch (the split-KV attention launch before it is not part of this file).
template <typename Kernel_traits, bool IsEvenKConst>
void run_mha_fwd_splitkv_combine(Flash_fwd_params& params, cudaStream_t stream) {
  if (params.num_splits > 1) {
    // We want kBlockM to be as small as possible for more parallelism.
    // With 128 threads we can load 512 elements at a time, so if headdim is divisible by 128, kBlockM = 4.
    constexpr static int kBlockM =
        Kernel_traits::kHeadDim % 128 == 0 ? 4 : (Kernel_traits::kHeadDim % 64 == 0 ? 8 : 16);
    dim3 grid_combine((params.b * params.h * params.seqlen_q + kBlockM - 1) / kBlockM);
    if (params.num_splits <= 2) {
      LAUNCH_COMBINE(1);
    } else if (params.num_splits <= 4) {
      LAUNCH_COMBINE(2);
    } else if (params.num_splits <= 8) {
      LAUNCH_COMBINE(3);
    } else if (params.num_splits <= 16) {
      LAUNCH_COMBINE(4);
    } else if (params.num_splits <= 32) {
      LAUNCH_COMBINE(5);
    } else if (params.num_splits <= 64) {
      LAUNCH_COMBINE(6);
    } else if (params.num_splits <= 128) {
      LAUNCH_COMBINE(7);
    }
  }
}

// oaccum: [num_splits, b, h, seqlen_q, 128] float; lseaccum: [num_splits, b, h, seqlen_q] float; o: [b, seqlen_q, h,
// 128] bf16; lse: [h, b * seqlen_q] float (unpadded); device pointers; head dim 128.
void mha_fwd_splitkv_combine_hdim128_bf16(void* oaccum, void* lseaccum, void* o, void* lse, int b, int h,
                                          int seqlen_q, int num_splits, cudaStream_t stream) {
  Flash_fwd_params params;
  params.oaccum_ptr = oaccum;
  params.softmax_lseaccum_ptr = lseaccum;
  params.o_ptr = o;
  params.softmax_lse_ptr = lse;
  params.b = b;
  params.h = h;
  params.seqlen_q = seqlen_q;
  params.d = 128;
  params.d_rounded = 128;
  params.num_splits = num_splits;
  params.o_row_stride = (int64_t)h * 128;
  params.o_head_stride = 128;
  params.o_batch_stride = (int64_t)seqlen_q * h * 128;
  params.unpadded_lse = true;
  params.seqlenq_ngroups_swapped = false;
  // Is_even_K: d == kHeadDim
  run_mha_fwd_splitkv_combine<flash::Flash_fwd_kernel_traits<128, 64, 64, 4, __nv_bfloat16>, true>(params, stream);
}
