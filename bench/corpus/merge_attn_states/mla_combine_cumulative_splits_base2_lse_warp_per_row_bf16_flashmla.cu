// The split-KV combine of DeepSeek's FlashMLA decoding (csrc/kernels/mla_combine.cu, flash_fwd_mla_combine_kernel
// and run_flash_mla_combine_kernel, the legacy SM90 dense path), bf16 out:
//   the MLA decoding kernel split each batch's KV range over SM partitions and left, for every split s of every
//   query row (h_k = 1: the s_q * h_q query rows of a batch are its q_seq_per_hk rows),
//     lse_accum [total_splits, num_q_seqs]          fp32, in BASE 2 (log2 of the partial sum, scores * log2 e)
//     o_accum   [total_splits, num_q_seqs, 512]     fp32, each split's partial output NORMALIZED by its own sum
//   the splits of batch b are [num_splits_ptr[b], num_splits_ptr[b + 1]): a CUMULATIVE index into the split rows
//   (a batch left in one split was written by the decoding kernel itself: the combine returns untouched);
//   max_lse = max_s lse_s (0 if all -inf), global = log2(sum_s exp2(lse_s - max_lse)) + max_lse (+inf if the sum is
//   0 or NaN), lse[b, row] = global / log2 e (natural), out[b, row] = bf16(sum_s exp2(lse_s - global) * o_s)
//   with splits of zero weight skipped.
// FlashMLA's conventions: template <ElementT, HEAD_DIM_V = 512, BLOCK_SIZE_M = 8, MAX_SPLITS, NUM_THREADS =
// BLOCK_SIZE_M * 32>, __launch_bounds__(NUM_THREADS); grid (b, ceil(h_k * q_seq_per_hk / BLOCK_SIZE_M)): a block
// takes 8 query rows of one batch and WARP w takes row w; the block first copies the rows' lse_accum into a
// [BLOCK_SIZE_M][MAX_SPLITS + 1] dynamic-shared table (padded against bank conflicts, -inf past the valid rows),
// then each warp reduces its row's splits (ceil(MAX_SPLITS / 32) per lane) by xor shuffles, turns them into scales
// in place, and accumulates HEAD_DIM_V / 32 = 16 channels per lane over the splits (#pragma unroll 2) before one
// bf16 store per channel; MAX_SPLITS from MLA_NUM_SPLITS_SWITCH over num_sm_parts (32 / 64 / 96 / 128 / 160), the
// dynamic shared size set with cudaFuncSetAttribute; cudaGridDependencySynchronize / cudaTriggerProgrammatic-
// LaunchCompletion for programmatic dependent launch. FlashMLA passes the fields below in a __grid_constant__
// Flash_fwd_mla_params struct and launches through cudaLaunchKernelEx with the PDL attribute; a kerntune spec
// describes scalar and pointer arguments only, so the kernel takes the fields it reads as arguments (the launcher
// unpacks its params struct) and the launcher uses <<< >>>, where the PDL calls are no-ops.
// Inputs: the cumulative split index is drawn at random in [0, total_splits] (a decreasing pair is an empty range:
// lse +inf and a zero row, as the kernel defines it); o and lse are inout, a one-split batch leaving them as they are.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#define FLASH_DEVICE_ASSERT(cond) assert(cond)

static constexpr int HEAD_DIM_V_MLA = 512;

/* kerntune:
args  = ["o_ptr: inout bf16[batch * s_q * h_q * 512]", "softmax_lse_ptr: inout f32[batch * s_q * h_q]",
         "o_batch_stride: i64 = s_q * h_q * 512", "o_row_stride: i64 = 512", "o_head_stride: i64 = 512",
         "h_k: i32 = 1", "q_seq_per_hk: i32 = s_q * h_q",
         "num_splits_ptr: in i32[batch + 1] ~ randint(0, batch + num_sm_parts + 1)",
         "softmax_lseaccum_ptr: in f32[(batch + num_sm_parts) * s_q * h_q] ~ uniform(0, 20)",
         "oaccum_ptr: in f32[(batch + num_sm_parts) * s_q * h_q * 512]"]
sizes = [{ batch = 16, s_q = 4, h_q = 128, num_sm_parts = 48 }, { batch = 4, s_q = 1, h_q = 128, num_sm_parts = 60 },
         { batch = 5, s_q = 1, h_q = 23, num_sm_parts = 33 }]
grid  = ["batch", "cdiv(s_q * h_q, 8)"]
block = 256
smem  = "8 * (64 + 1) * 4"
template_args = ["__nv_bfloat16", "512", "8", "64", "256"]
*/
template <typename ElementT, int HEAD_DIM_V, int BLOCK_SIZE_M, int MAX_SPLITS, int NUM_THREADS>
__global__ void __launch_bounds__(NUM_THREADS)
flash_fwd_mla_combine_kernel(ElementT *__restrict__ o_ptr, float *__restrict__ softmax_lse_ptr,
                             const int64_t o_batch_stride, const int64_t o_row_stride, const int64_t o_head_stride,
                             const int h_k, const int q_seq_per_hk, const int *__restrict__ num_splits_ptr,
                             const float *__restrict__ softmax_lseaccum_ptr, const float *__restrict__ oaccum_ptr) {
    // grid_shape: [batch_size, num_q_heads*s_q / BLOCK_SIZE_M]
    // each CTA gathers the activations of some query rows of one batch, scales, accumulates and saves them
    static_assert(NUM_THREADS / 32 == BLOCK_SIZE_M, "one warp per query row");
    const int batch_idx = blockIdx.x;
    const int m_block_idx = blockIdx.y;
    const int warp_idx = threadIdx.x / 32;
    const int lane_idx = threadIdx.x % 32;

    const int start_split_idx = __ldg(num_splits_ptr + batch_idx);
    const int end_split_idx = __ldg(num_splits_ptr + batch_idx + 1);
    const int my_num_splits = end_split_idx - start_split_idx;
    FLASH_DEVICE_ASSERT(my_num_splits <= MAX_SPLITS);
    if (my_num_splits == 1) {
        return;
    }

    const int num_q_seqs = q_seq_per_hk * h_k;
    const int num_cur_valid_q_seqs = min(BLOCK_SIZE_M, num_q_seqs - m_block_idx * BLOCK_SIZE_M);
    // gLseAccum (split, seq): stride num_q_seqs, 1
    const float *gLseAccum = softmax_lseaccum_ptr + start_split_idx * num_q_seqs + m_block_idx * BLOCK_SIZE_M;
    // gLse (seq): stride 1
    float *gLse = softmax_lse_ptr + batch_idx * num_q_seqs + m_block_idx * BLOCK_SIZE_M;

    // sLseScale (seq, split): stride MAX_SPLITS + 1, 1 (+1 against bank conflicts)
    extern __shared__ float smem_buf[];
    float *sLseScale = smem_buf;

    // wait for the previous kernel (the MLA decoding kernel) to finish
    cudaGridDependencySynchronize();

    // read gLseAccum into sLseScale
    {
#pragma unroll 4
        for (int elem_idx = threadIdx.x; elem_idx < my_num_splits * BLOCK_SIZE_M; elem_idx += NUM_THREADS) {
            int split_idx = elem_idx / BLOCK_SIZE_M;
            int seq_idx = elem_idx % BLOCK_SIZE_M;
            sLseScale[seq_idx * (MAX_SPLITS + 1) + split_idx] =
                seq_idx < num_cur_valid_q_seqs ? gLseAccum[split_idx * num_q_seqs + seq_idx] : -INFINITY;
        }
        __syncthreads();
    }

    if (warp_idx >= num_cur_valid_q_seqs)
        return;

    // warp #i gathers LseAccum for seq #i
    {
        constexpr int NUM_LSE_PER_THREAD = (MAX_SPLITS + 31) / 32;
        float local_lse[NUM_LSE_PER_THREAD];
#pragma unroll
        for (int i = 0; i < NUM_LSE_PER_THREAD; ++i) {
            const int split_idx = i * 32 + lane_idx;
            local_lse[i] = split_idx < my_num_splits ? sLseScale[warp_idx * (MAX_SPLITS + 1) + split_idx] : -INFINITY;
        }

        float max_lse = -INFINITY;
#pragma unroll
        for (int i = 0; i < NUM_LSE_PER_THREAD; ++i)
            max_lse = max(max_lse, local_lse[i]);
#pragma unroll
        for (int offset = 16; offset >= 1; offset /= 2)
            max_lse = max(max_lse, __shfl_xor_sync(uint32_t(-1), max_lse, offset));
        max_lse = max_lse == -INFINITY ? 0.0f : max_lse;  // in case all local LSEs are -inf

        float sum_lse = 0;
#pragma unroll
        for (int i = 0; i < NUM_LSE_PER_THREAD; ++i)
            sum_lse = sum_lse + exp2f(local_lse[i] - max_lse);
#pragma unroll
        for (int offset = 16; offset >= 1; offset /= 2)
            sum_lse = sum_lse + __shfl_xor_sync(uint32_t(-1), sum_lse, offset);

        float global_lse = (sum_lse == 0.f || sum_lse != sum_lse) ? INFINITY : log2f(sum_lse) + max_lse;
        if (lane_idx == 0)
            gLse[warp_idx] = global_lse / (float)M_LOG2E;

#pragma unroll
        for (int i = 0; i < NUM_LSE_PER_THREAD; ++i) {
            const int split_idx = i * 32 + lane_idx;
            if (split_idx < my_num_splits)
                sLseScale[warp_idx * (MAX_SPLITS + 1) + split_idx] = exp2f(local_lse[i] - global_lse);
        }
    }

    __syncwarp();

    // warp #i accumulates activation for seq #i
    {
        const int64_t row_offset_oaccum =
            (int64_t)(start_split_idx * num_q_seqs + m_block_idx * BLOCK_SIZE_M + warp_idx) * HEAD_DIM_V;
        // gOaccum (split, channel): stride num_q_seqs * HEAD_DIM_V, 1
        const float *gOaccum = oaccum_ptr + row_offset_oaccum;

        static_assert(HEAD_DIM_V % 32 == 0, "whole lanes");
        constexpr int ELEMS_PER_THREAD = HEAD_DIM_V / 32;
        float result[ELEMS_PER_THREAD];
#pragma unroll
        for (int i = 0; i < ELEMS_PER_THREAD; ++i)
            result[i] = 0.0f;

#pragma unroll 2
        for (int split = 0; split < my_num_splits; ++split) {
            float lse_scale = sLseScale[warp_idx * (MAX_SPLITS + 1) + split];
            if (lse_scale != 0.f) {
#pragma unroll
                for (int i = 0; i < ELEMS_PER_THREAD; ++i) {
                    result[i] += lse_scale * gOaccum[(int64_t)split * num_q_seqs * HEAD_DIM_V + lane_idx + i * 32];
                }
            }
        }

        cudaTriggerProgrammaticLaunchCompletion();

        const int q_seq_idx = m_block_idx * BLOCK_SIZE_M + warp_idx;
        const int k_head_idx = q_seq_idx / q_seq_per_hk;
        ElementT *o = o_ptr + batch_idx * o_batch_stride + k_head_idx * o_head_stride +
                      (q_seq_idx % q_seq_per_hk) * o_row_stride;

#pragma unroll
        for (int i = 0; i < ELEMS_PER_THREAD; ++i)
            o[lane_idx + i * 32] = (ElementT)result[i];
    }
}

#define MLA_NUM_SPLITS_SWITCH(NUM_SPLITS, NAME, ...)       \
    [&] {                                                  \
        if (NUM_SPLITS <= 32) {                            \
            constexpr static int NAME = 32;                \
            return __VA_ARGS__();                          \
        } else if (NUM_SPLITS <= 64) {                     \
            constexpr static int NAME = 64;                \
            return __VA_ARGS__();                          \
        } else if (NUM_SPLITS <= 96) {                     \
            constexpr static int NAME = 96;                \
            return __VA_ARGS__();                          \
        } else if (NUM_SPLITS <= 128) {                    \
            constexpr static int NAME = 128;               \
            return __VA_ARGS__();                          \
        } else if (NUM_SPLITS <= 160) {                    \
            constexpr static int NAME = 160;               \
            return __VA_ARGS__();                          \
        } else {                                           \
            throw std::invalid_argument("num_sm_parts");   \
        }                                                  \
    }()

// The fields of FlashMLA's decoding params the combine reads (device pointers).
struct Flash_fwd_mla_params {
    using index_t = int64_t;
    int b;             // batch size
    int h_k;           // kv heads (1 for MLA)
    int q_seq_per_hk;  // s_q * h_q / h_k
    void *__restrict__ o_ptr;
    void *__restrict__ softmax_lse_ptr;
    index_t o_batch_stride;
    index_t o_row_stride;
    index_t o_head_stride;
    int num_sm_parts;
    int *__restrict__ num_splits_ptr;  // [b + 1], cumulative
    void *__restrict__ softmax_lseaccum_ptr;
    void *__restrict__ oaccum_ptr;
};

template <typename ElementT>
void run_flash_mla_combine_kernel(Flash_fwd_mla_params &params, cudaStream_t stream) {
    MLA_NUM_SPLITS_SWITCH(params.num_sm_parts, NUM_SPLITS, [&] {
        constexpr int BLOCK_SIZE_M = 8;
        constexpr int NUM_THREADS = BLOCK_SIZE_M * 32;
        constexpr size_t smem_size = BLOCK_SIZE_M * (NUM_SPLITS + 1) * sizeof(float);
        auto combine_kernel =
            &flash_fwd_mla_combine_kernel<ElementT, HEAD_DIM_V_MLA, BLOCK_SIZE_M, NUM_SPLITS, NUM_THREADS>;
        cudaFuncSetAttribute(combine_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_size);
        dim3 grid(params.b, (params.h_k * params.q_seq_per_hk + BLOCK_SIZE_M - 1) / BLOCK_SIZE_M, 1);
        combine_kernel<<<grid, NUM_THREADS, smem_size, stream>>>(
            reinterpret_cast<ElementT *>(params.o_ptr), reinterpret_cast<float *>(params.softmax_lse_ptr),
            params.o_batch_stride, params.o_row_stride, params.o_head_stride, params.h_k, params.q_seq_per_hk,
            params.num_splits_ptr, reinterpret_cast<const float *>(params.softmax_lseaccum_ptr),
            reinterpret_cast<const float *>(params.oaccum_ptr));
    });
}

template void run_flash_mla_combine_kernel<__nv_bfloat16>(Flash_fwd_mla_params &params, cudaStream_t stream);

// Host entry for a batch of MLA decoding: o [b, s_q, h_q, 512] bf16 and lse [b, s_q * h_q] fp32 written in place
// of the one-split rows the decoding kernel left; device pointers.
void mla_combine(void *o, void *lse, int b, int s_q, int h_q, int num_sm_parts, int *num_splits, void *lse_accum,
                 void *o_accum, cudaStream_t stream) {
    Flash_fwd_mla_params params;
    params.b = b;
    params.h_k = 1;
    params.q_seq_per_hk = s_q * h_q;
    params.o_ptr = o;
    params.softmax_lse_ptr = lse;
    params.o_batch_stride = int64_t(s_q) * h_q * HEAD_DIM_V_MLA;
    params.o_row_stride = HEAD_DIM_V_MLA;
    params.o_head_stride = HEAD_DIM_V_MLA;
    params.num_sm_parts = num_sm_parts;
    params.num_splits_ptr = num_splits;
    params.softmax_lseaccum_ptr = lse_accum;
    params.oaccum_ptr = o_accum;
    run_flash_mla_combine_kernel<__nv_bfloat16>(params, stream);
}
