// Two-way merge of attention results by their log-sum-exps as Hydragen does it (ScalingIntelligence/hydragen,
// hydragen/attention.py: combine_lse -> combine_lse_triton -> the Triton combine_lse_kernel, used by
// hydragen_attention to merge the shared-prefix attention with the unique-suffix attention), written as the CUDA
// kernel that Triton program is:
//   out1, out2 [batch, seq_len, qheads, hdim] bf16 (flash-attn outputs) viewed as (b s h) rows of hdim, row stride
//   bsh_stride (= hdim, the tensors are asserted contiguous); lse1, lse2 [batch, seq_len, qheads] fp32, TOKEN-MAJOR
//   (hydragen rearranges flash-attn's [b, h, q] lse to [b, q, h] and makes it contiguous); natural-log domain:
//     max_lse = max(lse1, lse2); a1 = exp(lse1 - max_lse); a2 = exp(lse2 - max_lse)
//     aggregated = (out1 * a1 + out2 * a2) / (a1 + a2)       (a true division, fp32; one rounding to bf16)
//   no merged lse is returned; argument order of the Triton kernel: out1, out2, lse1, lse2, aggregated, bsh_stride,
//   bsh, hdim (the Python wrapper takes out1, lse1, out2, lse2)
//   launch: one program (block) per BLOCK_SIZE_BSH = 32 rows, num_warps = 2 -> 64 threads; the hdim axis walked in
//   BLOCK_SIZE_HDIM = 64 column tiles; here each thread owns one column of the 64-wide tile, the 32 rows' weights
//   are computed once by the first 32 threads into shared memory (the Triton program holds them as a [32] vector)
// Fixed: the Triton kernel's store mask was `out_offs + i * BLOCK_SIZE_HDIM < hdim * bsh`, a bound on the whole
// flattened tensor, not on the row: for hdim not a multiple of 64 (80, 96) the last tile of a row spilled into the
// next row, overwriting it with this row's weights (and racing with the program that owns it). Here a column is
// processed only when col < hdim and a row only when row < bsh.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#define BLOCK_SIZE_BSH 32
#define BLOCK_SIZE_HDIM 64
#define NUM_WARPS 2

/* kerntune:
args  = ["out1_ptr: in bf16[B * S * H * D]", "out2_ptr: in bf16[B * S * H * D]",
         "lse1_ptr: in f32[B * S * H] ~ uniform(-4, 12)", "lse2_ptr: in f32[B * S * H] ~ uniform(-4, 12)",
         "aggregated_ptr: out bf16[B * S * H * D]", "bsh_stride: i32 = D", "bsh: i32 = B * S * H", "hdim: i32 = D"]
sizes = [{ B = 64, S = 128, H = 32, D = 128 }, { B = 8, S = 1, H = 32, D = 128 },
         { B = 3, S = 37, H = 7, D = 80 }]
grid  = "cdiv(B * S * H, 32)"
block = 64
*/
__global__ void combine_lse_kernel(const __nv_bfloat16* __restrict__ out1_ptr,
                                   const __nv_bfloat16* __restrict__ out2_ptr, const float* __restrict__ lse1_ptr,
                                   const float* __restrict__ lse2_ptr, __nv_bfloat16* __restrict__ aggregated_ptr,
                                   int bsh_stride, int bsh, int hdim) {
    __shared__ float adjust_factor1[BLOCK_SIZE_BSH];
    __shared__ float adjust_factor2[BLOCK_SIZE_BSH];
    __shared__ float new_denominator[BLOCK_SIZE_BSH];

    const int bsh_idx = blockIdx.x;
    const int lse_start = bsh_idx * BLOCK_SIZE_BSH;

    // the [BLOCK_SIZE_BSH] vectors of the program (masked loads with other = 0)
    if (threadIdx.x < BLOCK_SIZE_BSH) {
        const int lse_off = lse_start + threadIdx.x;
        const float lse1 = lse_off < bsh ? lse1_ptr[lse_off] : 0.0f;
        const float lse2 = lse_off < bsh ? lse2_ptr[lse_off] : 0.0f;
        const float max_lse = fmaxf(lse1, lse2);
        const float f1 = expf(lse1 - max_lse);
        const float f2 = expf(lse2 - max_lse);
        adjust_factor1[threadIdx.x] = f1;
        adjust_factor2[threadIdx.x] = f2;
        new_denominator[threadIdx.x] = f1 + f2;
    }
    __syncthreads();

    const int n_tiles = (hdim + BLOCK_SIZE_HDIM - 1) / BLOCK_SIZE_HDIM;
    for (int i = 0; i < n_tiles; i++) {
        const int col = i * BLOCK_SIZE_HDIM + threadIdx.x;
        if (col >= hdim) continue;
        for (int r = 0; r < BLOCK_SIZE_BSH; r++) {
            const int row = lse_start + r;
            if (row >= bsh) break;
            const int64_t off = (int64_t)row * bsh_stride + col;
            const float out1 = __bfloat162float(out1_ptr[off]);
            const float out2 = __bfloat162float(out2_ptr[off]);
            const float agg = (out1 * adjust_factor1[r] + out2 * adjust_factor2[r]) / new_denominator[r];
            aggregated_ptr[off] = __float2bfloat16(agg);
        }
    }
}

// combine_lse_triton(out1, lse1, out2, lse2): out1, out2 [batch, seq_len, qheads, hdim] bf16 contiguous,
// lse1, lse2 [batch, seq_len, qheads] fp32 contiguous; aggregated allocated by the caller like out1.
void combine_lse_triton(const __nv_bfloat16* out1, const float* lse1, const __nv_bfloat16* out2, const float* lse2,
                        __nv_bfloat16* aggregated, int batch, int seq_len, int qheads, int hdim,
                        cudaStream_t stream) {
    const int BSH = batch * seq_len * qheads;
    const int bsh_stride = hdim;  // out1_flat.stride(0)
    const dim3 grid((BSH + BLOCK_SIZE_BSH - 1) / BLOCK_SIZE_BSH);
    const dim3 block(NUM_WARPS * 32);
    combine_lse_kernel<<<grid, block, 0, stream>>>(out1, out2, lse1, lse2, aggregated, bsh_stride, BSH, hdim);
}
