// Merge of the partial attention results of shared prompt chunks as Microsoft ChunkAttention writes it
// (microsoft/chunk-attention, cpp/chunk_attn/kernel_cuda.cu: the "merge existing result" path of
// attn_seq_first_kernel, which folds the chunk-first phase's cached per-chunk results attns / maxs / sums into each
// sequence's output, with warp_vector_merge and the cross-warp epilogue), fp16:
//   attns [n_parts, n_heads, n_seqs, d_head] fp16 UNNORMALIZED partial outputs (sum over a chunk of
//   exp(s - max) * v), maxs, sums [n_parts, n_heads, n_seqs] fp32 (score max and sum of exp(s - max) of each chunk),
//   HEAD-MAJOR like the chunk-first phase writes them; output [n_seqs, n_heads, d_head] token-major
//   grid (n_heads, n_seqs), 128 threads = 4 warps; warp w folds parts w, w + 4, ... into its own __shared__ fp16
//   accumulator row (d_head + 8 padding) with a running (max, sum): lane 0 computes expf(cached_max - new_max) and
//   expf(old_max - new_max), __shfl_sync broadcasts them, the row is updated as half2
//   acc = __hfma2(cached, scale_b, __hmul2(acc, scale_a)) (both scales rounded to fp16, the accumulator rounded to
//   fp16 at every part); after a barrier lane 0 of every warp rebuilds the four warp scales and
//   div = __fdividef(1, sum + 1e-6f), broadcast by shuffles, and out = fp16(sum_w acc_w * scale_w * div)
//   template <scalar_t, d_head> (spec <half, 128>), namespace GPT, argument order of the original (cached results,
//   output-side sizes last), stream
// Changed: the cached results of the dense all-sequences case (every shared chunk covers the whole batch: the common
// system prompt), so the offsets / begins / ends tables and the new-chunk attention of the same kernel are left out.
// Fixed: warp_vector_merge covered d_head / 64 half2 per lane only when d_head is a multiple of 64 (96 left a third
// of the row unmerged); the lanes now stride over the d_head / 2 pairs.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

namespace GPT {

template<typename scalar_t>
class TypeTraits {};

template<>
class TypeTraits<half> {
  public:
    using scalar2_t = half2;
    __inline__ __device__ static scalar2_t mul2(const scalar2_t& a, const scalar2_t& b) { return __hmul2(a, b); }
    __inline__ __device__ static scalar2_t fma2(const scalar2_t& a, const scalar2_t& b, const scalar2_t& c) {
        return __hfma2(a, b, c);
    }
    __inline__ __device__ static scalar2_t float_to_scalar2(const float& a) { return __float2half2_rn(a); }
    __inline__ __device__ static float to_float(const half& a) { return __half2float(a); }
    __inline__ __device__ static half float_to_scalar(const float& a) { return __float2half(a); }
};

// a = a * scale_a + b * scale_b over one row of N elements, by the 32 lanes of a warp, in scalar2_t pairs
template<typename scalar_t, int N>
__inline__ __device__ void warp_vector_merge(scalar_t* a, const scalar_t* b, float scale_a, float scale_b) {
    constexpr int warp_size = 32;
    int lane_idx = threadIdx.x % warp_size;
    using scalar2_t = typename TypeTraits<scalar_t>::scalar2_t;
    scalar2_t scale_a2 = TypeTraits<scalar_t>::float_to_scalar2(scale_a);
    scalar2_t scale_b2 = TypeTraits<scalar_t>::float_to_scalar2(scale_b);
    scalar2_t* a_2 = reinterpret_cast<scalar2_t*>(a);
    const scalar2_t* b_2 = reinterpret_cast<const scalar2_t*>(b);

#pragma unroll
    for (int offset = lane_idx; offset < N / 2; offset += warp_size) {
        a_2[offset] = TypeTraits<scalar_t>::fma2(b_2[offset], scale_b2, TypeTraits<scalar_t>::mul2(a_2[offset], scale_a2));
    }
    __syncwarp();
}

/* kerntune:
args  = ["attns: in f16[n_parts * n_heads * n_seqs * 128]",
         "maxs: in f32[n_parts * n_heads * n_seqs] ~ uniform(-4, 12)",
         "sums: in f32[n_parts * n_heads * n_seqs] ~ uniform(1, 64)",
         "output: out f16[n_seqs * n_heads * 128]",
         "n_parts: i32 = n_parts", "n_heads: i32 = n_heads", "n_seqs: i32 = n_seqs"]
sizes = [{ n_parts = 8, n_heads = 32, n_seqs = 1024 }, { n_parts = 4, n_heads = 32, n_seqs = 4 },
         { n_parts = 5, n_heads = 7, n_seqs = 37 }]
grid  = ["n_heads", "n_seqs"]
block = 128
template_args = ["half", "128"]
*/
template<typename scalar_t, int d_head>
__global__ void attn_merge_cached_kernel(
  const scalar_t* __restrict__ attns, // n_parts<[n_heads, n_seqs, d_head]>
  const float* __restrict__ maxs,     // n_parts<[n_heads, n_seqs]>
  const float* __restrict__ sums,     // n_parts<[n_heads, n_seqs]>
  scalar_t* __restrict__ output,      // [n_seqs, n_heads, d_head]
  int n_parts,
  int n_heads,
  int n_seqs) {
    constexpr uint32_t thread_num = 128;
    constexpr uint32_t warp_size = 32;
    constexpr uint32_t warp_num = thread_num / warp_size;
    constexpr uint32_t padding_head_dim = d_head + 16 / sizeof(scalar_t);

    const uint32_t head_idx = blockIdx.x;
    const uint32_t seq_idx = blockIdx.y;

    const uint32_t thread_idx = threadIdx.x;
    const uint32_t wrap_idx = thread_idx / warp_size;
    const uint32_t lane_idx = thread_idx % warp_size;

    const uint32_t q_row_offset = seq_idx * n_heads * d_head + head_idx * d_head;
    scalar_t* output_seq = output + q_row_offset;

    __shared__ scalar_t shared_output[warp_num * padding_head_dim];
    __shared__ float shared_score_max[warp_num];
    __shared__ float shared_score_sum[warp_num];

#pragma unroll
    for (int i = lane_idx; i < d_head; i += warp_size) {
        shared_output[wrap_idx * padding_head_dim + i] = 0;
    }
    __syncwarp();

    // each warp merges one cached part at a time
    // warp 0 -> part: 0 4 8 12...
    float score_max = -FLT_MAX;
    float score_sum = 0;
    for (int i = wrap_idx; i < n_parts; i += warp_num) {
        scalar_t* shared_output_chunk = shared_output + wrap_idx * padding_head_dim;
        const int max_sum_offset = (i * n_heads + head_idx) * n_seqs + seq_idx;
        float cached_max = maxs[max_sum_offset];
        float cached_sum = sums[max_sum_offset];
        const scalar_t* cached_qkv_result = attns + static_cast<int64_t>(max_sum_offset) * d_head;

        float new_score_max = fmax(score_max, cached_max);
        float cached_scale =
          __shfl_sync(0xffffffff, lane_idx == 0 ? expf(cached_max - new_score_max) : 0, 0);
        float scale =
          __shfl_sync(0xffffffff, lane_idx == 0 ? expf(score_max - new_score_max) : 0, 0);
        score_max = new_score_max;
        score_sum = cached_sum * cached_scale + score_sum * scale;
        warp_vector_merge<scalar_t, d_head>(shared_output_chunk, cached_qkv_result, scale, cached_scale);
    }
    if (lane_idx == 0) {
        shared_score_max[wrap_idx] = score_max;
        shared_score_sum[wrap_idx] = score_sum;
    }
    __syncthreads();

    float scale[warp_num];
    float div = 0;

    // only one thread computes the scales in each warp
    if (lane_idx == 0) {
        score_max = shared_score_max[0];
        score_sum = 0;
#pragma unroll
        for (int i = 1; i < warp_num; i++) {
            score_max = fmaxf(score_max, shared_score_max[i]);
        }
#pragma unroll
        for (int i = 0; i < warp_num; i++) {
            scale[i] = expf(shared_score_max[i] - score_max);
            score_sum += shared_score_sum[i] * scale[i];
        }
        div = __fdividef(1.f, score_sum + 1e-6f);
    }
    __syncwarp();

#pragma unroll
    for (int i = 0; i < warp_num; i++) {
        scale[i] = __shfl_sync(0xffffffff, scale[i], 0);
    }
    div = __shfl_sync(0xffffffff, div, 0);

#pragma unroll
    for (int i = thread_idx; i < d_head; i += thread_num) {
        float output_dim = 0;
#pragma unroll
        for (int j = 0; j < warp_num; j++) {
            output_dim += TypeTraits<scalar_t>::to_float(shared_output[j * padding_head_dim + i]) * scale[j];
        }
        output_seq[i] = TypeTraits<scalar_t>::float_to_scalar(output_dim * div);
    }
}

// attns: device [n_parts, n_heads, n_seqs, d_head]; maxs, sums: device [n_parts, n_heads, n_seqs];
// output: device [n_seqs, n_heads, d_head]
template<typename scalar_t, int d_head>
void attn_merge_cached(const scalar_t* attns, const float* maxs, const float* sums, scalar_t* output, int n_parts,
                       int n_heads, int n_seqs, cudaStream_t stream) {
    dim3 grid(n_heads, n_seqs);
    dim3 block(128);
    attn_merge_cached_kernel<scalar_t, d_head>
      <<<grid, block, 0, stream>>>(attns, maxs, sums, output, n_parts, n_heads, n_seqs);
}

template void attn_merge_cached<half, 128>(const half*, const float*, const float*, half*, int, int, int,
                                           cudaStream_t);
template void attn_merge_cached<half, 96>(const half*, const float*, const float*, half*, int, int, int,
                                          cudaStream_t);

} // namespace GPT
