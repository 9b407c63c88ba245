// The int4 KV-cache dequantization of PyTorch FBGEMM's gen-AI kernels (fbgemm_gpu/experimental/gen_ai/src/kv_cache/
// kv_cache.cu, dequantize_int4_cache_kernel and dequantize_int4_cache; the packing from kv_cache.cuh), the cache of
// Meta's Llama inference with int4 K / V: each cache row [B][MAX_T][N_KVH] holds D_HQ = D_H / 2 + 4 bytes, a
// __half2 qparam header (x = scale, y = shift) then D_H / 2 bytes of 4-bit codes (low nibble first), and
//   x_dq = bf16(half(q * scale + shift))          for t < kv_seqlen[b]; rows past it stay as they are (zeros)
// FBGEMM's conventions: D_H = 128 a namespace constexpr, kThreadsPerWarp = 32 and kWarpsPerBlock = 32: block
// (32, 32) with ONE WARP PER (t, head) ROW, warps striding over the rows below kv_seqlen[b] by blockDim.y * gridDim.y,
// grid (B, max(1, kMaxBlocks = 256 / B)); each lane reads the 4-byte header as a uint, 2 bytes of K codes and 2 of V
// codes as uint16 and packs them into one uint32 (k | v << 16) so that K and V dequantize together: the nibbles are
// masked out in place as fp16 SUBNORMALS (v & 0x000F000F, v & 0x00F000F0), multiplied by 32768 in one mul.f16x2 to
// integers times 2^-9 / 2^-5, then one __hfma2 with the scale times 512 (low nibbles) or 32 (high nibbles) and the
// shift, every step in fp16; the four K and four V values go out as a uint2 each; template <KVQuantNumGroups>
// (1 here: one header per row; groupwise headers otherwise) launched through a
// CALL_DEQUANTIZE_INT4_CACHE_GROUPWISE_KERNEL macro per group count. FBGEMM reads the tensors through
// at::PackedTensorAccessor64 and takes the sizes from them; here the kernel gets raw pointers and the sizes.
// FBGEMM's DEVICE_INLINE is `__device__ inline __attribute__((always_inline))`, which kerntune's parser does not
// read (the corpus's parse test requires a clean parse): written with __forceinline__, the same attribute; the
// launcher's macros are adjusted likewise (noted there).
// Inputs: cache bytes randint(0, 64), so that every header half is finite (exponent field below 16) and the codes
// cover the low nibble fully; kv_seqlen randint(1, MAX_T + 1); outputs zeros, as FBGEMM allocates them.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#define DEVICE_INLINE __device__ __forceinline__

namespace fbgemm_gpu {

constexpr int32_t kThreadsPerWarp = 32;
constexpr int32_t kWarpsPerBlock = 32;
constexpr int32_t D_H = 128;

struct __align__(16) bfx8 {
  __nv_bfloat162 vals[4];
};

struct __align__(16) halfx8 {
  __half2 vals[4];
};

// two 16-bit lanes of lhs taken as fp16 and multiplied by rhs in one mul.f16x2
DEVICE_INLINE __half2 hmul_short2(uint32_t lhs, __half rhs) {
  __half2 ret;
  __half2 rhsp = make_half2(rhs, rhs);
  asm("mul.f16x2 %0, %1, %2;"
      : "=r"(*reinterpret_cast<unsigned int*>(&ret))
      : "r"(lhs), "r"(*reinterpret_cast<const unsigned int*>(&rhsp)));
  return ret;
}

// v: K codes in the low 16 bits, V codes in the high 16 bits (4 nibbles each, low nibble first); the qparams
// (x = scale, y = shift) of K and of V. vals[0..1] are the 4 K values, vals[2..3] the 4 V values.
DEVICE_INLINE bfx8 dequantize_packed_int4(uint32_t v, __half2 shift_scale_0, __half2 shift_scale_1) {
  halfx8 res;
  res.vals[0] = hmul_short2(v & 0x000F000F, __float2half(32768));
  res.vals[1] = hmul_short2(v & 0x00F000F0, __float2half(32768));
  v >>= 8;
  res.vals[2] = hmul_short2(v & 0x000F000F, __float2half(32768));
  res.vals[3] = hmul_short2(v & 0x00F000F0, __float2half(32768));

  half shift_scale_0_x = __low2half(shift_scale_0);
  half shift_scale_0_y = __high2half(shift_scale_0);
  half shift_scale_1_x = __low2half(shift_scale_1);
  half shift_scale_1_y = __high2half(shift_scale_1);

  // a low nibble n is now n * 2^-9, a high one n * 2^-5: scale them back by 512 and 32
  auto shifts = __half2(shift_scale_0_y, shift_scale_1_y);
  auto scales_lower = __half2(__hmul(shift_scale_0_x, __float2half(512)), __hmul(shift_scale_1_x, __float2half(512)));
  auto scales_upper = __half2(__hmul(shift_scale_0_x, __float2half(32)), __hmul(shift_scale_1_x, __float2half(32)));

  auto r0 = __half22float2(__hfma2(res.vals[0], scales_lower, shifts));
  auto r1 = __half22float2(__hfma2(res.vals[1], scales_upper, shifts));
  auto r2 = __half22float2(__hfma2(res.vals[2], scales_lower, shifts));
  auto r3 = __half22float2(__hfma2(res.vals[3], scales_upper, shifts));

  bfx8 result;
  result.vals[0] = __floats2bfloat162_rn(r0.x, r1.x);
  result.vals[1] = __floats2bfloat162_rn(r2.x, r3.x);
  result.vals[2] = __floats2bfloat162_rn(r0.y, r1.y);
  result.vals[3] = __floats2bfloat162_rn(r2.y, r3.y);
  return result;
}

/* kerntune:
args  = ["cache_K: in u8[B * MAX_T * N_KVH * 68] ~ randint(0, 64)",
         "cache_V: in u8[B * MAX_T * N_KVH * 68] ~ randint(0, 64)",
         "kv_seqlen: in i32[B] ~ randint(1, MAX_T + 1)",
         "cache_K_dq: inout bf16[B * MAX_T * N_KVH * 128] ~ zeros",
         "cache_V_dq: inout bf16[B * MAX_T * N_KVH * 128] ~ zeros",
         "MAX_T: i32 = MAX_T", "N_KVH: i32 = N_KVH", "D_HQ: i32 = 68", "D_H_dq: i32 = 128"]
sizes = [{ B = 16, MAX_T = 4096, N_KVH = 8 }, { B = 4, MAX_T = 2048, N_KVH = 8 }, { B = 3, MAX_T = 1001, N_KVH = 1 }]
grid  = ["B", "max(1, 256 / B)"]
block = ["32", "32"]
template_args = ["1"]
*/
template <int KVQuantNumGroups = 1>
__global__ void dequantize_int4_cache_kernel(
    uint8_t* cache_K,  // [B][MAX_T][N_KVH][D_HQ]
    uint8_t* cache_V,  // [B][MAX_T][N_KVH][D_HQ]
    int32_t* kv_seqlen,  // [B]
    __nv_bfloat16* cache_K_dq,  // [B][MAX_T][N_KVH][D_H]
    __nv_bfloat16* cache_V_dq,  // [B][MAX_T][N_KVH][D_H]
    int32_t MAX_T,
    int32_t N_KVH,
    int32_t D_HQ,
    int32_t D_H_dq) {
  auto b = blockIdx.x;
  // only need to dequantize this far.
  auto max_t = kv_seqlen[b];

  // one warp per T/H
  for (auto t_h = threadIdx.y + blockIdx.y * blockDim.y; t_h < max_t * N_KVH; t_h += blockDim.y * gridDim.y) {
    auto h = t_h % N_KVH;
    auto t = t_h / N_KVH;

    auto* row_k = &cache_K[((int64_t(b) * MAX_T + t) * N_KVH + h) * D_HQ];
    auto* row_v = &cache_V[((int64_t(b) * MAX_T + t) * N_KVH + h) * D_HQ];
    bfx8 kv_dq;
    if (KVQuantNumGroups == 1) {
      __half2 k_shift_scale;
      __half2 v_shift_scale;
      *reinterpret_cast<uint*>(&k_shift_scale) = *reinterpret_cast<uint*>(&row_k[0]);
      *reinterpret_cast<uint*>(&v_shift_scale) = *reinterpret_cast<uint*>(&row_v[0]);
      if (4 * threadIdx.x >= D_H_dq) {
        continue;
      }
      uint32_t kq = *reinterpret_cast<uint16_t*>(&row_k[threadIdx.x * 2 + 4]);
      uint32_t vq = *reinterpret_cast<uint16_t*>(&row_v[threadIdx.x * 2 + 4]);

      uint32_t packed = kq | (vq << 16);
      kv_dq = dequantize_packed_int4(packed, k_shift_scale, v_shift_scale);
    } else {
      __half2 k_shift_scale;
      __half2 v_shift_scale;
      auto group_size = D_H_dq / KVQuantNumGroups;
      auto group_idx = threadIdx.x * 4 / group_size;

      *reinterpret_cast<uint*>(&k_shift_scale) = *reinterpret_cast<uint*>(&row_k[4 * group_idx]);
      *reinterpret_cast<uint*>(&v_shift_scale) = *reinterpret_cast<uint*>(&row_v[4 * group_idx]);

      int32_t int4_qparam_offset = 4 * KVQuantNumGroups;

      if (4 * threadIdx.x >= D_H_dq) {
        continue;
      }

      uint32_t kq = *reinterpret_cast<uint16_t*>(&row_k[threadIdx.x * 2 + int4_qparam_offset]);
      uint32_t vq = *reinterpret_cast<uint16_t*>(&row_v[threadIdx.x * 2 + int4_qparam_offset]);

      uint32_t packed = kq | (vq << 16);

      kv_dq = dequantize_packed_int4(packed, k_shift_scale, v_shift_scale);
    }
    // now, write our outputs
    auto* row_k_dq = &cache_K_dq[((int64_t(b) * MAX_T + t) * N_KVH + h) * D_H_dq];
    auto* row_v_dq = &cache_V_dq[((int64_t(b) * MAX_T + t) * N_KVH + h) * D_H_dq];

    *reinterpret_cast<uint2*>(&row_k_dq[4 * threadIdx.x]) = *reinterpret_cast<uint2*>(&kv_dq.vals[0]);
    *reinterpret_cast<uint2*>(&row_v_dq[4 * threadIdx.x]) = *reinterpret_cast<uint2*>(&kv_dq.vals[2]);
  }
}

#define CALL_DEQUANTIZE_INT4_CACHE_GROUPWISE_KERNEL(NUM_GROUPS, ...) \
  dequantize_int4_cache_kernel<NUM_GROUPS><<<blocks, threads, 0, stream>>>(__VA_ARGS__);

// cache_K / cache_V [B][MAX_T][N_KVH][D_HQ] uint8 (D_HQ = D_H / 2 + 4 * num_groups), kv_seqlen [B] int32,
// cache_K_dq / cache_V_dq [B][MAX_T][N_KVH][D_H] bf16, zeroed by the caller (FBGEMM allocates them with at::zeros);
// device pointers.
void dequantize_int4_cache(uint8_t* cache_K, uint8_t* cache_V, int32_t* kv_seqlen, __nv_bfloat16* cache_K_dq,
                           __nv_bfloat16* cache_V_dq, int32_t B, int32_t MAX_T, int32_t N_KVH, int32_t D_HQ,
                           int64_t num_groups, cudaStream_t stream) {
  // D_HQ == D_H // 2 + 4 * num_groups (int4 + 4 x half qparams per group)
  auto int4_qparam_offset = 4 * num_groups;
  int32_t D_H_dq = (D_HQ - int4_qparam_offset) * 2;
  if (B == 0) {
    return;
  }

  constexpr int32_t kMaxBlocks = 256;
  dim3 blocks(B, std::max<int32_t>(1, kMaxBlocks / B));
  dim3 threads(kThreadsPerWarp, kWarpsPerBlock);
  // FBGEMM hands CALL_DEQUANTIZE_INT4_CACHE_GROUPWISE_KERNEL by name to a
  // CALL_INT4_KERNEL_WITH_KV_GROUPWISE_QUANT_CHECK switch macro; kerntune's parser does not take a function-like
  // macro's name as a macro argument (the corpus's parse test requires a clean parse), so that switch is written out
  // here, one case per supported group count.
  switch (num_groups) {
    case 1:
      CALL_DEQUANTIZE_INT4_CACHE_GROUPWISE_KERNEL(1, cache_K, cache_V, kv_seqlen, cache_K_dq, cache_V_dq, MAX_T, N_KVH,
                                                  D_HQ, D_H_dq);
      break;
    case 2:
      CALL_DEQUANTIZE_INT4_CACHE_GROUPWISE_KERNEL(2, cache_K, cache_V, kv_seqlen, cache_K_dq, cache_V_dq, MAX_T, N_KVH,
                                                  D_HQ, D_H_dq);
      break;
    case 4:
      CALL_DEQUANTIZE_INT4_CACHE_GROUPWISE_KERNEL(4, cache_K, cache_V, kv_seqlen, cache_K_dq, cache_V_dq, MAX_T, N_KVH,
                                                  D_HQ, D_H_dq);
      break;
    case 8:
      CALL_DEQUANTIZE_INT4_CACHE_GROUPWISE_KERNEL(8, cache_K, cache_V, kv_seqlen, cache_K_dq, cache_V_dq, MAX_T, N_KVH,
                                                  D_HQ, D_H_dq);
      break;
    default:
      throw std::invalid_argument("Unsupported number of groups");
  }
}

}  // namespace fbgemm_gpu
