// Per-token, per-128-channel FP8 cast as DeepSeek's DeepEP performs it inside its low-latency MoE dispatch before
// tokens go on the wire (deepseek-ai/DeepEP, csrc/kernels/internode_ll.cu, the kUseFP8 send path of dispatch<...>
// with warp_reduce_max and calculate_fp8_scales from utils.cuh), bf16 in, fp8 e4m3 out:
//   x [num_tokens, kHidden] bf16 read as int4 (8 bf16 per thread, __ldg); amax of the 8 values seeded with the
//   margin kFP8Margin = 1e-4, reduced over the 16 lanes that cover one 128-channel group (xor shuffles 8, 4, 2, 1
//   on the full warp: each half-warp is one group), scale = 448 / amax and scale_inv = amax / 448, or with
//   kUseUE8M0 both rounded up to a power of two (exponent-bit arithmetic); lanes 0 and 16 store scale_inv to
//   x_scales [num_tokens, kHidden / 128] (row-major, the send buffer's layout); values cast pairwise by
//   __nv_cvt_float2_to_fp8x2(.., __NV_SATFINITE, __NV_E4M3) and stored 8 bytes (int2) at a time
//   PERSISTENT over tokens as DeepEP's dispatch: grid = min(num_tokens, num_sms) with num_sms = 132, block
//   1024 threads (32 warps), token_idx = blockIdx.x, += num_sms; the cast uses the first 31 warps (the last one
//   does the expert-count bookkeeping in DeepEP and idles here); template <kUseUE8M0, kHidden> from the host
//   switch (spec <false, 7168>), kHidden / 8 a multiple of 32 (static assert: whole warps in the reduction)
// Changed: the cast is taken out of the dispatch kernel (no RDMA / NVLink send, no top-k routing, no receive
// phase), so the output is the local send buffer split into x_fp8 and x_scales. No bug found in this path.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#define EP_STATIC_ASSERT(cond, reason) static_assert(cond, reason)

namespace deep_ep {

constexpr float kFP8Margin = 1e-4;
constexpr float kFP8Amax = 448;
constexpr float kFP8AmaxInv = 1 / 448.0f;

template <int kNumLanes = 32>
__forceinline__ __device__ float warp_reduce_max(float value) {
    EP_STATIC_ASSERT(kNumLanes == 32 or kNumLanes == 16 or kNumLanes == 8, "Invalid number of lanes");
    #pragma unroll
    for (int mask = kNumLanes / 2; mask > 0; mask >>= 1)
        value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, mask));
    return value;
}

// ceil(log2(x)) of a positive normal float from its exponent and mantissa bits
__forceinline__ __device__ int fast_log2_ceil(float x) {
    const uint32_t bits = __float_as_uint(x);
    const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127;
    return exponent + ((bits & 0x7fffffu) != 0 ? 1 : 0);
}

__forceinline__ __device__ float fast_pow2(int x) {
    return __uint_as_float(static_cast<uint32_t>(x + 127) << 23);
}

template <bool kUseUE8M0>
__forceinline__ __device__ void calculate_fp8_scales(float amax, float& scale, float& scale_inv) {
    if constexpr (kUseUE8M0) {
        const float exp_scale_inv = fast_pow2(fast_log2_ceil(amax * kFP8AmaxInv));
        scale = 1.0f / exp_scale_inv;
        scale_inv = exp_scale_inv;
    } else {
        scale = kFP8Amax / amax;
        scale_inv = amax * kFP8AmaxInv;
    }
}

namespace internode_ll {

constexpr int kNumPerChannels = 128;

/* kerntune:
args  = ["x: in bf16[num_tokens * 7168]", "x_fp8: out u8[num_tokens * 7168]",
         "x_scales: out f32[num_tokens * 56]", "num_tokens: i32 = num_tokens", "num_sms: i32 = 132"]
sizes = [{ num_tokens = 8192 }, { num_tokens = 4 }, { num_tokens = 999 }]
grid  = "min(num_tokens, 132)"
block = 1024
template_args = ["false", "7168"]
*/
template <bool kUseUE8M0, int kHidden>
__global__ __launch_bounds__(1024, 1) void dispatch_fp8_cast(const void* x, void* x_fp8, float* x_scales,
                                                            int num_tokens, int num_sms) {
    const auto sm_id = static_cast<int>(blockIdx.x);
    const auto thread_id = static_cast<int>(threadIdx.x);
    const auto warp_id = thread_id / 32, lane_id = thread_id % 32;
    const auto num_warps = static_cast<int>(blockDim.x) / 32;
    const auto num_threads = (num_warps - 1) * 32;

    // FP8 constants of this hidden size
    constexpr int kNumElemsPerRead = sizeof(int4) / sizeof(nv_bfloat16);
    constexpr int hidden_bf16_int4 = kHidden / kNumElemsPerRead;
    constexpr int kNumScales = kHidden / kNumPerChannels;
    EP_STATIC_ASSERT(hidden_bf16_int4 % 32 == 0, "Must use the full warp to reduce");
    EP_STATIC_ASSERT(kNumElemsPerRead * 32 / kNumPerChannels == 2, "Invalid vectorization");
    using vec_t = int2;

    for (int token_idx = sm_id; token_idx < num_tokens; token_idx += num_sms) {
        const auto x_int4 = static_cast<const int4*>(x) + static_cast<int64_t>(token_idx) * hidden_bf16_int4;
        const auto x_vec = static_cast<vec_t*>(x_fp8) + static_cast<int64_t>(token_idx) * hidden_bf16_int4;
        const auto x_token_scales = x_scales + static_cast<int64_t>(token_idx) * kNumScales;

        if (warp_id < num_warps - 1) {
            #pragma unroll
            for (int i = thread_id; i < hidden_bf16_int4; i += num_threads) {
                // Read
                auto int4_value = __ldg(x_int4 + i);

                // Calculate local amax
                auto bf16_values = reinterpret_cast<nv_bfloat16*>(&int4_value);
                float fp32_values[kNumElemsPerRead];
                float amax = kFP8Margin, scale, scale_inv;
                #pragma unroll
                for (int j = 0; j < kNumElemsPerRead; ++j) {
                    fp32_values[j] = static_cast<float>(bf16_values[j]);
                    amax = fmaxf(amax, fabsf(fp32_values[j]));
                }

                // Reduce amax over the 16 lanes of this 128-channel group and scale
                amax = warp_reduce_max<16>(amax);
                calculate_fp8_scales<kUseUE8M0>(amax, scale, scale_inv);
                if (lane_id == 0 or lane_id == 16)
                    x_token_scales[i * kNumElemsPerRead / kNumPerChannels] = scale_inv;

                // Cast into the send buffer
                vec_t int2_value;
                auto fp8x2_values = reinterpret_cast<__nv_fp8x2_storage_t*>(&int2_value);
                #pragma unroll
                for (int j = 0; j < kNumElemsPerRead; j += 2) {
                    float2 fp32x2 = {fp32_values[j] * scale, fp32_values[j + 1] * scale};
                    fp8x2_values[j / 2] = __nv_cvt_float2_to_fp8x2(fp32x2, __NV_SATFINITE, __NV_E4M3);
                }
                x_vec[i] = int2_value;
            }
        }
    }
}

#define SWITCH_HIDDEN(case_macro) \
    switch (hidden) { \
        case 2048: case_macro(2048); \
        case 4096: case_macro(4096); \
        case 7168: case_macro(7168); \
        default: return; \
    }

// x: device [num_tokens, hidden] bf16; x_fp8: device [num_tokens, hidden] fp8 e4m3; x_scales: device
// [num_tokens, hidden / 128] fp32 (scale_inv)
void dispatch_fp8_cast_launch(const void* x, void* x_fp8, float* x_scales, int num_tokens, int hidden,
                              bool use_ue8m0, int num_sms, cudaStream_t stream) {
    constexpr int kNumWarps = 32;
    const int num_blocks = std::min(num_tokens, num_sms);
#define DISPATCH_CAST_LAUNCH_CASE(hidden_case) { \
    if (use_ue8m0) \
        dispatch_fp8_cast<true, hidden_case><<<num_blocks, kNumWarps * 32, 0, stream>>>(x, x_fp8, x_scales, num_tokens, num_sms); \
    else \
        dispatch_fp8_cast<false, hidden_case><<<num_blocks, kNumWarps * 32, 0, stream>>>(x, x_fp8, x_scales, num_tokens, num_sms); \
    } break
    SWITCH_HIDDEN(DISPATCH_CAST_LAUNCH_CASE);
#undef DISPATCH_CAST_LAUNCH_CASE
}

}  // namespace internode_ll
}  // namespace deep_ep
