// Token-wise 4-bit KV-cache packing as BitDecoding writes it (DD-DuDa/BitDecoding, csrc/bit_decode/src/include/
// qpack.h qpack_kc_vt / qpack_Kchannel_Vtensor behind kvcache_pack_i4, the KIVI-style low-bit cache of its
// tensor-core decoding kernels). The value cache is quantized per token and head over groups of group_size = 128
// (= head_dim, the interface default): asymmetric min-max, range = max - min, scale_inv = 15 / range (0 when the
// range is 0), q = clamp(roundf((x - min) * scale_inv), 0, 15), and the stored parameters are scale = 1 / scale_inv
// (0 for a flat group) and zero = min, the fp32 scale_inv used for the codes themselves (the stored scale is the
// rounded reciprocal). Four codes are packed into one uint16 with val0 in the lowest nibble (packed |= v3, <<= 4, ...,
// |= v0), so v_pack holds head_dim / 4 uint16 per (token, head). fp16 v_cache [tokens, heads, 128] (the unpadded
// batch * seqlen_k layout of kvcache_pack_int), v_pack uint16 [tokens, heads, 32], v_params fp16
// [tokens, heads, 2] = (scale, zero).
// Changed: BitDecoding runs this inside its CuTe pack kernel on register fragments of an MMA layout, reducing min
// and max over the 4-lane groups that share a row (warp_reduce with the group_pos test, then a 4-warp shared-memory
// pass); written here as a plain CUDA kernel with one warp per 128-value group: lane l owns values 4l .. 4l + 3 (one
// 8-byte load), min and max by full-warp xor butterflies, one uint16 store per lane; 4 groups per block of 128
// threads, grid ceil(tokens * heads / 4); the params layout is simplified to one (scale, zero) pair per group. No
// bug found. Sizes: 32768 cached tokens x 8 KV heads, 4 decode tokens x 8 heads, 999 tokens x 7 heads.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace quant {

constexpr int kGroupSize = 128;        // one group per (token, head): group_size == head_dim
constexpr int kNumBits = 4;
constexpr int kWarpsPerBlock = 4;

/* kerntune:
args  = ["v: in f16[T * H * 128]", "v_pack: out u16[T * H * 32]", "v_params: out f16[T * H * 2]",
         "num_groups: i32 = T * H"]
sizes = [{ T = 32768, H = 8 }, { T = 4, H = 8 }, { T = 999, H = 7 }]
grid  = "cdiv(T * H, 4)"
block = 128
*/
__global__ void qpack_v_tokenwise_i4_kernel(const half* __restrict__ v, uint16_t* __restrict__ v_pack,
                                            half* __restrict__ v_params, int num_groups) {
    const int warp_id = threadIdx.x / 32;
    const int lane_id = threadIdx.x % 32;
    const int group = blockIdx.x * kWarpsPerBlock + warp_id;
    if (group >= num_groups) return;  // whole warp

    const float max_val = float((1 << kNumBits) - 1);

    // 4 consecutive values per lane
    const half2* src = reinterpret_cast<const half2*>(v + (size_t)group * kGroupSize + lane_id * 4);
    const float2 lo = __half22float2(src[0]);
    const float2 hi = __half22float2(src[1]);
    float val0 = lo.x, val1 = lo.y, val2 = hi.x, val3 = hi.y;

    float g_max = fmaxf(fmaxf(val0, val1), fmaxf(val2, val3));
    float g_min = fminf(fminf(val0, val1), fminf(val2, val3));
    #pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) {
        g_max = fmaxf(g_max, __shfl_xor_sync(0xffffffff, g_max, mask));
        g_min = fminf(g_min, __shfl_xor_sync(0xffffffff, g_min, mask));
    }

    const float range = g_max - g_min;
    // Avoid division by zero
    const float scale_inv = (range > 0.0f) ? (max_val / range) : 0.0f;
    if (lane_id == 0) {
        v_params[(size_t)group * 2 + 0] = __float2half(scale_inv == 0 ? 0.0f : 1.0f / scale_inv);  // actual scale
        v_params[(size_t)group * 2 + 1] = __float2half(g_min);
    }

    val0 = (val0 - g_min) * scale_inv;
    val1 = (val1 - g_min) * scale_inv;
    val2 = (val2 - g_min) * scale_inv;
    val3 = (val3 - g_min) * scale_inv;

    // Round and clamp the values
    val0 = fminf(fmaxf(roundf(val0), 0.0f), max_val);
    val1 = fminf(fmaxf(roundf(val1), 0.0f), max_val);
    val2 = fminf(fmaxf(roundf(val2), 0.0f), max_val);
    val3 = fminf(fmaxf(roundf(val3), 0.0f), max_val);

    // Pack the 4 quantized values into a 16-bit integer, val0 lowest
    uint16_t packed = 0;
    packed |= (static_cast<uint16_t>(static_cast<uint8_t>(val3)) & 0xF);
    packed <<= 4;
    packed |= (static_cast<uint16_t>(static_cast<uint8_t>(val2)) & 0xF);
    packed <<= 4;
    packed |= (static_cast<uint16_t>(static_cast<uint8_t>(val1)) & 0xF);
    packed <<= 4;
    packed |= (static_cast<uint16_t>(static_cast<uint8_t>(val0)) & 0xF);

    v_pack[(size_t)group * (kGroupSize / 4) + lane_id] = packed;
}

}  // namespace quant

// kvcache_pack_i4, value half: V_unpad [batch * seqlen_k, nheads_k, d] with d == group_size == 128.
void kvcache_pack_v_i4(const half* v_unpad, uint16_t* v_pack, half* v_params, int num_tokens, int nheads_k,
                       cudaStream_t stream) {
    const int num_groups = num_tokens * nheads_k;
    dim3 grid((num_groups + quant::kWarpsPerBlock - 1) / quant::kWarpsPerBlock);
    dim3 block(quant::kWarpsPerBlock * 32);
    quant::qpack_v_tokenwise_i4_kernel<<<grid, block, 0, stream>>>(v_unpad, v_pack, v_params, num_groups);
}
