// Merge of two attention partials as TensorRT-LLM's MLA chunked-prefill path writes it (cpp/tensorrt_llm/kernels/
// mlaChunkedPrefill.cu, mergeAttnWithSoftmaxKernel behind invokeMergeAttnWithSoftmax, its first, dense-layout version;
// DeepSeek-V3 context attention over the cached KV chunk by chunk), bf16:
//   pre_attn, curr_attn, merged_attn: [B, S, H, D] (S = chunked_token_size, D = head_size = MLA's 128 v dims)
//   softmax stats: float [B, S, H, 2] = (max, sum) pairs per row of P = QK^T, the running max first and the
//                  UNNORMALIZED sum of exponentials second: not an lse
//   m = fmaxf(m_pre, m_curr), pre_shift = exp(m_pre - m), curr_shift = exp(m_curr - m), l = l_pre * pre_shift +
//   l_curr * curr_shift, out = (pre * l_pre * pre_shift + curr * l_curr * curr_shift) / l, natural exp (std::exp)
// TensorRT-LLM's conventions: MergeSoftmaxTraits<T> (kNumThreads = 128, kElemPerThread = 16 / sizeof(T) = 8,
// kElemPerBlock = 1024), a VecReader union of cutlass::Array<T, 8> and uint4 loaded and stored as one 16-byte word,
// grid (batch, token, head-and-dim chunk) with threads laid over the flattened H * D of one token, every thread
// re-reading and re-merging the stats of its head, thread dim_idx == 0 writing the merged (max, sum), `T* const`
// arguments, int offsets. cutlass::Array<T, N> is written as a small Array struct of its own (operator[] over T
// storage). The launcher's z extent is TensorRT-LLM's formula (num_heads * head_size + kElemPerBlock - 1) /
// kElemPerThread, which over-launches about 128x (the blocks past the heads return at once): kept. Two fixes of real
// bugs, noted in place: the extent was a `static int const` (frozen by the first call, so a later call with another
// head count launches the first call's grid), now a plain const; and the head bound was checked after the stats were
// read, so the over-launched blocks (and the tail of H * D % 1024 != 0) read stats past the end: the check is moved
// before the reads. The (max, sum) stats are uniform(1, 12): a real max and a sum >= 1.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cmath>
#include <cstdint>

namespace cutlass_like {
template <typename T, int N>
struct Array {
    T storage[N];
    __device__ __forceinline__ T& operator[](int i) { return storage[i]; }
    __device__ __forceinline__ T const& operator[](int i) const { return storage[i]; }
};
}  // namespace cutlass_like

namespace
{

template <typename T>
struct MergeSoftmaxTraits
{
    static constexpr int kNumThreads = 128;
    static constexpr int kElemPerThread = 16 / sizeof(T);
    static constexpr int kElemPerBlock = kNumThreads * kElemPerThread;

    union VecReader
    {
        cutlass_like::Array<T, kElemPerThread> data;
        uint4 reader;
        static_assert(
            sizeof(uint4) == sizeof(cutlass_like::Array<T, kElemPerThread>), "Size mismatch for MergeSoftmaxTraits");
    };
};

/* kerntune:
args  = ["merged_attn: out bf16[batch * chunked_token_size * num_heads * 128]",
         "merged_softmax_sum: out f32[batch * chunked_token_size * num_heads * 2]",
         "pre_attn: in bf16[batch * chunked_token_size * num_heads * 128]",
         "pre_softmax_sum: in f32[batch * chunked_token_size * num_heads * 2] ~ uniform(1, 12)",
         "curr_attn: in bf16[batch * chunked_token_size * num_heads * 128]",
         "curr_softmax_sum: in f32[batch * chunked_token_size * num_heads * 2] ~ uniform(1, 12)",
         "batch_size: i32 = batch", "chunked_token_size: i32 = chunked_token_size", "num_heads: i32 = num_heads",
         "head_size: i32 = 128"]
sizes = [{ batch = 2, chunked_token_size = 512, num_heads = 128 },
         { batch = 8, chunked_token_size = 2, num_heads = 16 },
         { batch = 3, chunked_token_size = 777, num_heads = 20 }]
grid  = ["batch", "chunked_token_size", "(num_heads * 128 + 1023) / 8"]
block = 128
template_args = ["__nv_bfloat16"]
*/
template <typename T>
__global__ void mergeAttnWithSoftmaxKernel(T* merged_attn, float* merged_softmax_sum, T* const pre_attn,
    float* const pre_softmax_sum, T* const curr_attn, float* const curr_softmax_sum, int const batch_size,
    int const chunked_token_size, int const num_heads, int const head_size)
{
    using KT = MergeSoftmaxTraits<T>;
    int const batch_idx = blockIdx.x;
    int const token_idx = blockIdx.y;
    int const CurrentElementIdx = (blockIdx.z * KT::kElemPerBlock) + threadIdx.x * KT::kElemPerThread;

    int const head_idx = CurrentElementIdx / head_size;
    int const dim_idx = CurrentElementIdx % head_size;

    // fix: checked before the stats are read (TensorRT-LLM checks after them, reading past the stats' end)
    if (head_idx >= num_heads || dim_idx >= head_size)
    {
        return;
    }

    int const global_attn_offset = batch_idx * chunked_token_size * num_heads * head_size
        + token_idx * num_heads * head_size + head_idx * head_size;
    int const global_softmax_sum_offset
        = (((batch_idx * chunked_token_size * num_heads) + (token_idx * num_heads) + head_idx) * 2) + 1;
    int const global_softmax_max_offset = global_softmax_sum_offset - 1;
    auto* merged_attn_ptr = merged_attn + global_attn_offset;
    auto* merged_softmax_sum_ptr = merged_softmax_sum + global_softmax_sum_offset;
    auto* merged_softmax_max_ptr = merged_softmax_sum + global_softmax_max_offset;
    auto* pre_attn_ptr = pre_attn + global_attn_offset;
    auto* pre_softmax_sum_ptr = pre_softmax_sum + global_softmax_sum_offset;
    auto* pre_softmax_max_ptr = pre_softmax_sum + global_softmax_max_offset;
    auto* curr_attn_ptr = curr_attn + global_attn_offset;
    auto* curr_softmax_sum_ptr = curr_softmax_sum + global_softmax_sum_offset;
    auto* curr_softmax_max_ptr = curr_softmax_sum + global_softmax_max_offset;

    float pre_softmax_sum_val = *pre_softmax_sum_ptr;
    float curr_softmax_sum_val = *curr_softmax_sum_ptr;
    float pre_softmax_max_val = *pre_softmax_max_ptr;
    float curr_softmax_max_val = *curr_softmax_max_ptr;
    // merge softmax sum
    float merged_softmax_max_val = fmaxf(pre_softmax_max_val, curr_softmax_max_val);
    float pre_shift = std::exp(pre_softmax_max_val - merged_softmax_max_val);
    float curr_shift = std::exp(curr_softmax_max_val - merged_softmax_max_val);
    float merged_softmax_sum_val = (pre_softmax_sum_val * pre_shift) + (curr_softmax_sum_val * curr_shift);

    // merge softmax
    typename KT::VecReader pre_attn_reader{};
    typename KT::VecReader curr_attn_reader{};
    typename KT::VecReader merged_attn_reader{};
    pre_attn_reader.reader = *reinterpret_cast<decltype(pre_attn_reader.reader)*>(pre_attn_ptr + dim_idx);
    curr_attn_reader.reader = *reinterpret_cast<decltype(curr_attn_reader.reader)*>(curr_attn_ptr + dim_idx);

    for (int i = 0; i < KT::kElemPerThread; ++i)
    {
        merged_attn_reader.data[i]
            = (static_cast<float>(pre_attn_reader.data[i]) * pre_softmax_sum_val * pre_shift
                  + static_cast<float>(curr_attn_reader.data[i]) * curr_softmax_sum_val * curr_shift)
            / merged_softmax_sum_val;
    }
    // write merged attn back to global memory
    *reinterpret_cast<decltype(merged_attn_reader.reader)*>(merged_attn_ptr + dim_idx) = merged_attn_reader.reader;

    // write merged softmax sum and max back to global memory
    if (dim_idx == 0)
    {
        *merged_softmax_sum_ptr = merged_softmax_sum_val;
        *merged_softmax_max_ptr = merged_softmax_max_val;
    }
}

} // namespace

namespace tensorrt_llm
{
namespace kernels
{

// merged_attn [B, S, H, D] (T)
// merged_softmax_sum [B, S, H, 2] (float): the max of each row of P = QK^T, then its softmax sum
template <typename T>
void invokeMergeAttnWithSoftmax(T* merged_attn, float* merged_softmax_sum, T* const pre_attn,
    float* const pre_softmax_sum, T* const curr_attn, float* const curr_softmax_sum, int const batch_size,
    int const chunked_token_size, int const num_heads, int const head_size, cudaStream_t stream)
{
    using KT = MergeSoftmaxTraits<T>;
    // fix: `static int const` in TensorRT-LLM (computed once, by the first call)
    int const kNumHeadIterNeeded = (num_heads * head_size + KT::kElemPerBlock - 1) / KT::kElemPerThread;

    dim3 grid(batch_size, chunked_token_size, kNumHeadIterNeeded);
    dim3 block(KT::kNumThreads);

    mergeAttnWithSoftmaxKernel<T><<<grid, block, 0, stream>>>(merged_attn, merged_softmax_sum, pre_attn,
        pre_softmax_sum, curr_attn, curr_softmax_sum, batch_size, chunked_token_size, num_heads, head_size);
}

#define INSTANTIATE_MLA_CHUNKED_PREFILL_KERNEL(T)                                                                      \
    template void invokeMergeAttnWithSoftmax<T>(T * merged_attn, float* merged_softmax_sum, T* const pre_attn,         \
        float* const pre_softmax_sum, T* const curr_attn, float* const curr_softmax_sum, int const batch_size,         \
        int const chunked_token_size, int const num_heads, int const head_size, cudaStream_t stream);

INSTANTIATE_MLA_CHUNKED_PREFILL_KERNEL(__nv_bfloat16);

} // namespace kernels
} // namespace tensorrt_llm
