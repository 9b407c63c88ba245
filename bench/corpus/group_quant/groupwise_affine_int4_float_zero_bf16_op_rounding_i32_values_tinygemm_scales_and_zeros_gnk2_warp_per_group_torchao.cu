// Group-wise asymmetric int4 weight quantization in the style of pytorch/ao (torchao/quantization/utils.py:
// get_groupwise_affine_qparams + groupwise_affine_quantize_tensor_from_qparams + pack_tinygemm_scales_and_zeros,
// behind groupwise_affine_quantize_tensor, the int4 weight-only path feeding aten._weight_int4pack_mm, "tinygemm"),
// a chain of torch ops on a bf16 weight written as one CUDA kernel:
//   w [N, K] bf16 (out_features, in_features), groups of group_size along K; per group
//     scale = (max - min).clamp(min=1e-6) / 15                   (n_bit = 4, max_int = 15)
//     zero  = min + scale * 8                                     (FLOAT-DOMAIN zero point, 2 ** (n_bit - 1))
//     q     = ((w - (zero - scale * 8)) / scale).round().clamp(0, 15)
//   every torch op on bf16 tensors rounds its result to bf16 (sub, clamp, div, mul, add each once), round() is
//   round-half-to-even, values out as int32 [N, K] in 0..15 (.to(torch.int32), unpacked; the int4 packing for the
//   mm is a later op); scales_and_zeros bf16 [K / group_size, N, 2] = cat([scales, zeros], 2).transpose(0, 1): group
//   major, then the output channel, then (scale, zero)
//   launch (ours, torchao runs torch ops): one WARP PER GROUP, 8 groups per block of 256 (constexpr), groups in
//   row-major (n, group) order over a flat grid; lanes stride the group (group_size / 32 elements each), max and
//   min by __shfl_xor_sync butterflies, lane 0 writes the (scale, zero) pair, then the group is re-read from global
//   memory to quantize; stream argument
// Needs K % group_size == 0 (torchao asserts it). No bug found.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

constexpr int kWarpSize = 32;
constexpr int kGroupsPerBlock = 8;

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/* kerntune:
args  = ["w: in bf16[N * K]", "w_int4x8: out i32[N * K]", "scales_and_zeros: out bf16[K / 128 * N * 2]",
         "n_rows: i32 = N", "in_features: i32 = K", "groupsize: i32 = 128"]
sizes = [{ N = 14336, K = 4096 }, { N = 8, K = 4096 }, { N = 999, K = 2944 }]
grid  = "cdiv(N * K / 128, 8)"
block = 256
*/
__global__ void groupwise_affine_quantize_kernel(const __nv_bfloat16* __restrict__ w, int32_t* __restrict__ w_int4x8,
                                                 __nv_bfloat16* __restrict__ scales_and_zeros, int n_rows,
                                                 int in_features, int groupsize) {
    const int warp = threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    const int groups_per_row = in_features / groupsize;
    const int64_t group = (int64_t)blockIdx.x * kGroupsPerBlock + warp;
    if (group >= (int64_t)n_rows * groups_per_row) return;  // whole warp leaves together

    const int n = (int)(group / groups_per_row);
    const int g = (int)(group % groups_per_row);
    const __nv_bfloat16* to_quant = w + group * groupsize;

    // max_val = to_quant.amax(dim=1), min_val = to_quant.amin(dim=1)
    float max_val = -INFINITY, min_val = INFINITY;
    for (int i = lane; i < groupsize; i += kWarpSize) {
        const float v = __bfloat162float(to_quant[i]);
        max_val = fmaxf(max_val, v);
        min_val = fminf(min_val, v);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        max_val = fmaxf(max_val, __shfl_xor_sync(0xffffffff, max_val, offset));
        min_val = fminf(min_val, __shfl_xor_sync(0xffffffff, min_val, offset));
    }

    const int max_int = 15;             // 2 ** n_bit - 1
    const float mid = 8.0f;             // 2 ** (n_bit - 1)
    // scales = (max_val - min_val).clamp(min=1e-6) / max_int, each op rounded to bf16
    const float scale = bf16_round(fmaxf(bf16_round(max_val - min_val), bf16_round(1e-6f)) / (float)max_int);
    // zeros = min_val + scales * (2 ** (n_bit - 1))
    const float zero = bf16_round(min_val + bf16_round(scale * mid));

    if (lane == 0) {
        // pack_tinygemm_scales_and_zeros: [N, G, 2] transposed to [G, N, 2]
        __nv_bfloat16* sz = scales_and_zeros + ((int64_t)g * n_rows + n) * 2;
        sz[0] = __float2bfloat16_rn(scale);
        sz[1] = __float2bfloat16_rn(zero);
    }

    // groupwise_affine_quantize_tensor_from_qparams: min_val = zeros - scales * 2 ** (n_bit - 1)
    const float lo = bf16_round(zero - bf16_round(scale * mid));
    int32_t* q = w_int4x8 + group * groupsize;
    for (int i = lane; i < groupsize; i += kWarpSize) {
        const float v = __bfloat162float(to_quant[i]);
        const float r = rintf(bf16_round(bf16_round(v - lo) / scale));
        q[i] = (int32_t)fminf(fmaxf(r, 0.0f), (float)max_int);
    }
}

// w: device [n_rows, in_features] bf16; w_int4x8: device int32 [n_rows, in_features] (values 0..15);
// scales_and_zeros: device bf16 [in_features / groupsize, n_rows, 2]. in_features % groupsize == 0.
void groupwise_affine_quantize_tensor(const __nv_bfloat16* w, int32_t* w_int4x8, __nv_bfloat16* scales_and_zeros,
                                      int n_rows, int in_features, int groupsize, cudaStream_t stream) {
    const int64_t n_groups = (int64_t)n_rows * (in_features / groupsize);
    const int blocks = (int)((n_groups + kGroupsPerBlock - 1) / kGroupsPerBlock);
    groupwise_affine_quantize_kernel<<<blocks, kGroupsPerBlock * kWarpSize, 0, stream>>>(
        w, w_int4x8, scales_and_zeros, n_rows, in_features, groupsize);
}
