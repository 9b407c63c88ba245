// Fused residual ("skip") add + RMSNorm in the style of Alibaba rtp-llm's atex kernels
// (alibaba/rtp-llm, rtp_llm/cpp/kernels/atex/ops/f16/rmsnorm.cu: device_skip_rmsnorm_f16 behind
// launch_skiprmsnorm_fp16, atex/block/reduce.cuh, atex/copy/vec.cuh), fp16 path:
//   x, r (the skip / residual branch) [m, n], w [n]; two outputs, NOT in place: skip_out = x + r and
//   o = rmsnorm(skip_out) * w; argument order x, r, w, o, skip_out, eps; no size arguments: the row length is the
//   compile-time n = TPB * VPT * LOOP (in f16x2 pairs), the row is blockIdx.x
//   everything in f16x2 pairs (half2 here, bf16x2 in the bf16 launcher): VPT = 16 / sizeof(f16x2) = 4 pairs, moved
//   with 16-byte atex::copy<16> into per-thread register arrays; thread t owns pairs [t * VPT, t * VPT + VPT) of
//   each LOOP chunk of TPB * VPT pairs; template <typename f16x2_t, uint32_t TPB, uint32_t VPT, uint32_t LOOP>
//   the add is a PAIRED HALF add (f16x2 operator+, rounded to half), stored to skip_out, and the fp32 sum of squares
//   is taken from the rounded pair; atex::block::reduce_sum<TPB, true> (xor-shuffle warps, __shared__ workspace of
//   TPB / 32 floats, every warp re-reduces the partials: a broadcast reduce), divided by n * 2 (elements);
//   normalize_factor = rsqrt(mean + eps); the weight is loaded in the second loop into the register array that
//   held r; o = f16x2(x * w * factor) from fp32 with one rounding
//   host: a switch over the normalized shape (256 ... 16384) picks TPB = n / 8 threads, LOOP 2 for 16384; grid m
// The kernel and its launcher are written from the atex design with our own helpers (copy, cvt, reduce); the local
// register arrays are alignas(16) for the 16-byte copies. No bug found; x.numel() / n rows as in the original.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

namespace atex {

using fp32_t   = float;
using fp32x2_t = float2;
using fp16x2_t = half2;

constexpr uint32_t warpSize = 32;

template<uint32_t Bytes>
__device__ __forceinline__ void copy(const void* src, void* dst) {
    static_assert(Bytes == 16, "atex::copy: 16-byte vectors only");
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}

__device__ __forceinline__ fp32x2_t cvt_f16x2_to_f32x2(const fp16x2_t x) {
    return __half22float2(x);
}

template<typename f16x2_t>
__device__ __forceinline__ f16x2_t cvt_f32x2_to_f16x2(const fp32x2_t x);

template<>
__device__ __forceinline__ fp16x2_t cvt_f32x2_to_f16x2<fp16x2_t>(const fp32x2_t x) {
    return __float22half2_rn(x);
}

namespace warp {
__device__ __forceinline__ fp32_t reduce_sum(fp32_t value) {
#pragma unroll
    for (uint32_t mask = warpSize / 2; mask > 0; mask >>= 1) {
        value += __shfl_xor_sync(0xffffffff, value, mask);
    }
    return value;
}
}  // namespace warp

namespace block {
// Sum over the block; with Broadcast every thread returns the total.
template<uint32_t TPB, bool Broadcast>
__device__ __forceinline__ fp32_t reduce_sum(fp32_t value, fp32_t* workspace) {
    const uint32_t lane = threadIdx.x % warpSize;
    const uint32_t wid  = threadIdx.x / warpSize;

    value = warp::reduce_sum(value);
    if (lane == 0) {
        workspace[wid] = value;
    }
    __syncthreads();

    if (Broadcast) {
        value = lane < TPB / warpSize ? workspace[lane] : 0.0f;
        value = warp::reduce_sum(value);
    }
    return value;
}
}  // namespace block

namespace impl {

/* kerntune:
args  = ["x: in f16[m * n]", "r: in f16[m * n]", "w: in f16[n]", "o: out f16[m * n]", "skip_out: out f16[m * n]",
         "eps: f32 = 1e-6"]
sizes = [{ m = 8192, n = 4096 }, { m = 4, n = 4096 }, { m = 777, n = 4096 }]
template_args = ["half2", "512", "4", "1"]
grid  = "m"
block = 512
*/
template<typename f16x2_t, uint32_t TPB, uint32_t VPT, uint32_t LOOP>
__global__ void device_skip_rmsnorm_f16(const f16x2_t* const x,         // [m, n]
                                        const f16x2_t* const r,         // [m, n]
                                        const f16x2_t* const w,         // [n]
                                        f16x2_t*             o,         // [m, n]
                                        f16x2_t*             skip_out,  // [m, n]
                                        const fp32_t         eps) {
    alignas(16) f16x2_t local_x[VPT * LOOP];
    alignas(16) f16x2_t local_w[VPT * LOOP];

    const uint32_t     tid   = threadIdx.x;
    const uint32_t     bid   = blockIdx.x;
    const uint32_t     index = tid * VPT;
    constexpr uint32_t n     = TPB * VPT * LOOP;  // pairs per row

    auto _x        = x + bid * n;
    auto _r        = r + bid * n;
    auto _o        = o + bid * n;
    auto _skip_out = skip_out + bid * n;
    auto _w        = w;

    fp32_t local_sum = 0.0f;

#pragma unroll
    for (uint32_t loop = 0; loop < LOOP; loop++) {
        atex::copy<sizeof(f16x2_t) * VPT>(_x + index + loop * TPB * VPT, local_x + loop * VPT);
        atex::copy<sizeof(f16x2_t) * VPT>(_r + index + loop * TPB * VPT, local_w + loop * VPT);

#pragma unroll
        for (uint32_t i = 0; i < VPT; i++) {
            local_x[i + loop * VPT] = local_x[i + loop * VPT] + local_w[i + loop * VPT];
            fp32x2_t value          = atex::cvt_f16x2_to_f32x2(local_x[i + loop * VPT]);
            local_sum += value.y * value.y + value.x * value.x;
        }

        atex::copy<sizeof(f16x2_t) * VPT>(&local_x[loop * VPT], _skip_out + index + loop * TPB * VPT);
    }

    __shared__ fp32_t workspace[TPB / atex::warpSize];
    fp32_t            block_sum        = atex::block::reduce_sum<TPB, true>(local_sum, workspace) / (n * 2);
    fp32_t            normalize_factor = rsqrtf(block_sum + eps);
    alignas(16) f16x2_t local_o[VPT];

#pragma unroll
    for (uint32_t loop = 0; loop < LOOP; loop++) {
        atex::copy<sizeof(f16x2_t) * VPT>(_w + index + loop * TPB * VPT, local_w + loop * VPT);
#pragma unroll
        for (uint32_t i = 0; i < VPT; i++) {
            fp32x2_t value  = atex::cvt_f16x2_to_f32x2(local_x[i + loop * VPT]);
            fp32x2_t weight = atex::cvt_f16x2_to_f32x2(local_w[i + loop * VPT]);
            value.x         = value.x * weight.x * normalize_factor;
            value.y         = value.y * weight.y * normalize_factor;
            local_o[i]      = atex::cvt_f32x2_to_f16x2<f16x2_t>(value);
        }

        atex::copy<sizeof(f16x2_t) * VPT>(local_o, _o + index + loop * TPB * VPT);
    }
}

#define ATEX_SKIP_RMSNORM_CASE(SHAPE, THREADS, LOOPS)                                                            \
    case SHAPE:                                                                                                  \
        device_skip_rmsnorm_f16<fp16x2_t, THREADS, VPT, LOOPS><<<grid_size, THREADS, 0, stream>>>(             \
            PTR(x), PTR(skip), PTR(weight), PTR(output), PTR(skip_output), eps);                                 \
        break;

// x, skip, output, skip_output: device [rows, normalize_shape] half, contiguous; weight: device [normalize_shape].
void launch_skiprmsnorm_fp16(const half*  x,
                             const half*  skip,
                             const half*  weight,
                             half*        output,
                             half*        skip_output,
                             int64_t      rows,
                             int32_t      normalize_shape,
                             const float  eps,
                             cudaStream_t stream) {
    constexpr int32_t VPT       = 16 / sizeof(fp16x2_t);
    constexpr int32_t VPTx2     = 16 / sizeof(fp16x2_t) * 2;
    const int32_t     grid_size = static_cast<int32_t>(rows);

    if (normalize_shape % VPTx2 != 0) {
        throw std::runtime_error("Normalize shape should be a multiple of 8");
    }

    auto PTR = [](const void* p) { return reinterpret_cast<fp16x2_t*>(const_cast<void*>(p)); };

    switch (normalize_shape) {
        ATEX_SKIP_RMSNORM_CASE(256, 256 / VPTx2, 1)
        ATEX_SKIP_RMSNORM_CASE(512, 512 / VPTx2, 1)
        ATEX_SKIP_RMSNORM_CASE(768, 768 / VPTx2, 1)
        ATEX_SKIP_RMSNORM_CASE(1024, 1024 / VPTx2, 1)
        ATEX_SKIP_RMSNORM_CASE(1536, 1536 / VPTx2, 1)
        ATEX_SKIP_RMSNORM_CASE(2048, 2048 / VPTx2, 1)
        ATEX_SKIP_RMSNORM_CASE(4096, 4096 / VPTx2, 1)
        ATEX_SKIP_RMSNORM_CASE(8192, 8192 / VPTx2, 1)
        ATEX_SKIP_RMSNORM_CASE(16384, 8192 / VPTx2, 2)
        default:
            throw std::runtime_error("Normalize shape is not supported yet, check rmsnorm.cu for more information.");
    }
}

#undef ATEX_SKIP_RMSNORM_CASE

}  // namespace impl
}  // namespace atex
