// Per-group int4 activation quantization as MIT Han lab's Nunchaku (nunchaku-tech/nunchaku, the SVDQuant W4A4
// inference engine) defines it for its gemm_w4a4 input (quantize_w4a4_act: groups of 64 along K, symmetric int4,
// one 16-bit scale per group, scales stored K-group-major [K / 64, M]), written as the plain elementwise kernel
// of its src/kernels/misc_kernels_impl.cuh family (quant_kernel_static, cast_kernel), bf16:
//   input [M, K] row-major bf16; output [M, K / 2] uint8, two int4 per byte, the even element in the LOW nibble;
//   oscales [K / 64, M] bf16 (transposed: K-group-major, token-minor)
//   amax = max |x| over the 64 elements, scale = amax / 7 stored as T, q = clamp(rint(x * (7 / amax)), -8, 7)
//   (the reciprocal of the unrounded float scale multiplies; an all-zero group gives scale 0 and q 0)
// Launch in Nunchaku's misc style: a flat index, each thread `unroll` = 8 consecutive elements loaded as one
// Tvec<T, 8> (16 bytes), threadsPerBlock = 1024, blocksPerGrid = ceil(length / (1024 * unroll)); the 8 threads of a
// group combine their amax with width-8 xor shuffles, the first of them writes the scale; the packed bytes go out
// as one Tvec<uint8_t, 4>. Changed: Nunchaku's real quantizer is fused into its GEMM's MMA fragment layout (packed
// [M, K / 2] act and [K / 64, M] scales in warp-tile order, with the LoRA down-projection fused); here the layouts
// are the plain row-major / transposed ones and LoRA is left out. Threads past the end take part in the shuffles
// (no early return before them) and store nothing. No bug found.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace nunchaku::kernels {

template<typename T, int unroll>
struct alignas(sizeof(T) * unroll) Tvec {
    T data[unroll];
};

template<typename T>
__device__ __forceinline__ float to_float(T v) { return (float)v; }
template<>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template<typename T>
__device__ __forceinline__ T from_float(float v) { return (T)v; }
template<>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

static constexpr int WARP_SIZE = 32;
static constexpr int INT4_GROUP_SIZE = 64;

/* kerntune:
args  = ["input: in bf16[M * K]", "output: out u8[M * K / 2]", "oscales: out bf16[K / 64 * M]", "M: i32 = M",
         "K: i32 = K", "length: i64 = M * K"]
sizes = [{ M = 8192, K = 8192 }, { M = 4, K = 3072 }, { M = 999, K = 1344 }]
grid  = "cdiv(M * K, 8192)"
block = 1024
template_args = ["__nv_bfloat16", "8"]
*/
template<typename T, int unroll>
__global__ void quantize_w4a4_act_kernel(const T *input, uint8_t *output, T *oscales, int M, int K, size_t length) {
    static_assert(INT4_GROUP_SIZE % unroll == 0 && unroll % 2 == 0);
    constexpr int threads_per_group = INT4_GROUP_SIZE / unroll;

    const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * unroll;
    const bool valid = i < length;

    using Tvec = nunchaku::kernels::Tvec<T, unroll>;
    using U8vec = nunchaku::kernels::Tvec<uint8_t, unroll / 2>;

    Tvec rinput;
    float fx[unroll];
    if (valid) {
        rinput = *reinterpret_cast<const Tvec *>(&input[i]);
    }

    float maxvalue = 0.0f;
#pragma unroll
    for (int k = 0; k < unroll; k++) {
        fx[k] = valid ? to_float(rinput.data[k]) : 0.0f;
        maxvalue = fmaxf(maxvalue, fabsf(fx[k]));
    }

#pragma unroll
    for (int mask = threads_per_group / 2; mask > 0; mask /= 2) {
        maxvalue = fmaxf(maxvalue, __shfl_xor_sync(0xffffffff, maxvalue, mask, WARP_SIZE));
    }

    const float scale = maxvalue / 7.0f;
    const float rscale = maxvalue > 0.0f ? 7.0f / maxvalue : 0.0f;

    if (!valid) {
        return;
    }

    U8vec routput;
#pragma unroll
    for (int k = 0; k < unroll; k += 2) {
        const int lo = min(max(__float2int_rn(fx[k] * rscale), -8), 7);
        const int hi = min(max(__float2int_rn(fx[k + 1] * rscale), -8), 7);
        routput.data[k / 2] = (uint8_t)((lo & 0xf) | ((hi & 0xf) << 4));
    }
    *reinterpret_cast<U8vec *>(&output[i / 2]) = routput;

    if ((threadIdx.x % threads_per_group) == 0) {
        const size_t group = i / INT4_GROUP_SIZE;
        const int groups_per_row = K / INT4_GROUP_SIZE;
        const int m = (int)(group / groups_per_row);
        const int kg = (int)(group % groups_per_row);
        oscales[(size_t)kg * M + m] = from_float<T>(scale);
    }
}

inline int ceilDiv(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }

// input: device [M, K] (K a multiple of 64, 16-byte aligned); output: [M, K / 2] packed int4; oscales: [K / 64, M].
template<typename T>
void quantize_w4a4_act(const T *input, uint8_t *output, T *oscales, int M, int K, cudaStream_t stream) {
    constexpr int unroll = 16 / sizeof(T);
    const size_t length = (size_t)M * K;

    int threadsPerBlock = 1024;
    int blocksPerGrid = ceilDiv((int64_t)length, (int64_t)threadsPerBlock * unroll);

    quantize_w4a4_act_kernel<T, unroll><<<blocksPerGrid, threadsPerBlock, 0, stream>>>(
        input, output, oscales, M, K, length);
}

template void quantize_w4a4_act<__nv_bfloat16>(const __nv_bfloat16 *, uint8_t *, __nv_bfloat16 *, int, int, cudaStream_t);
template void quantize_w4a4_act<half>(const half *, uint8_t *, half *, int, int, cudaStream_t);

};  // namespace nunchaku::kernels
