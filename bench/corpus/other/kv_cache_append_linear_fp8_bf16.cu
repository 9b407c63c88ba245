// KV-cache write without rotary: the new tokens' key and value heads, taken from the fused QKV projection output,
// appended to a contiguous (non-paged) per-sequence cache in FP8, in TensorRT-LLM's linear KV-cache layout
// [max_batch, 2, num_kv_heads, max_seq_len, head_size] (per sequence: the K block, then the V block; a head's
// tokens contiguous) with an fp8 e4m3 cache quantized by a per-tensor scale given as its inverse
// (kv_scale_orig_quant, multiplied), as TensorRT-LLM's FP8 KV cache takes it:
//   qkv     bf16 [batch, seqlen_new, (num_heads + 2 * num_kv_heads) * head_size]   (q heads | k heads | v heads;
//           every sequence appends seqlen_new tokens, speculative-decoding / chunked-append style)
//   pos     = cache_seqlens[b] + s                       (int32 [batch], the tokens already cached)
//   kv_cache[b, 0, h, pos, :] = e4m3(k[b, s, h, :] * kv_scale_orig_quant)   (satfinite)
//   kv_cache[b, 1, h, pos, :] = e4m3(v[b, s, h, :] * kv_scale_orig_quant)
// The q heads are not read and the rest of the cache is left as it is.
// Launch: one block per new token, grid (seqlen_new, batch), constexpr 256 threads striding over the token's
// num_kv_heads * head_size / 8 chunks of 8 channels (one 16-byte uint4 load of 8 bf16 and one 8-byte store of 8
// fp8 codes each, for K then V); head_size must be a multiple of 8.
// Spec bytes: the K and V parts read and the fp8 codes written (the cache itself is not streamed).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

namespace kernels {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // bf16 channels per 16-byte load

__device__ __forceinline__ uint2 quantize_pack(const uint4 raw, const float scale) {
  const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
  uint2 out;
  uint16_t* o = reinterpret_cast<uint16_t*>(&out);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float2 f = __bfloat1622float2(h2[j]);
    f.x *= scale;
    f.y *= scale;
    o[j] = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);
  }
  return out;
}

/* kerntune:
args  = ["kv_cache: inout u8[batch * 2 * num_kv_heads * max_seq_len * head_size]",
         "qkv: in bf16[batch * seqlen_new * (num_heads + 2 * num_kv_heads) * head_size]",
         "cache_seqlens: in i32[batch] ~ randint(0, max_seq_len - seqlen_new + 1)",
         "kv_scale_orig_quant: in f32[1] ~ uniform(60, 120)", "num_heads: i32 = num_heads",
         "num_kv_heads: i32 = num_kv_heads", "head_size: i32 = head_size", "max_seq_len: i32 = max_seq_len"]
sizes = [{ batch = 8, seqlen_new = 2048, num_heads = 32, num_kv_heads = 8, head_size = 128, max_seq_len = 4096 },
         { batch = 32, seqlen_new = 1, num_heads = 32, num_kv_heads = 8, head_size = 128, max_seq_len = 2048 },
         { batch = 3, seqlen_new = 37, num_heads = 71, num_kv_heads = 1, head_size = 64, max_seq_len = 1000 }]
grid  = ["seqlen_new", "batch"]
block = 256
bytes = "batch * 4 + batch * seqlen_new * num_kv_heads * head_size * 2 * 3"
*/
__global__ void updateKVCacheLinearFp8Kernel(__nv_fp8_e4m3* kv_cache, const __nv_bfloat16* __restrict__ qkv,
                                             const int* __restrict__ cache_seqlens,
                                             const float* __restrict__ kv_scale_orig_quant, const int num_heads,
                                             const int num_kv_heads, const int head_size, const int max_seq_len) {
  const int s = blockIdx.x;
  const int b = blockIdx.y;
  const int seqlen_new = gridDim.x;
  const int pos = cache_seqlens[b] + s;
  const float scale = *kv_scale_orig_quant;

  const int qkv_stride = (num_heads + 2 * num_kv_heads) * head_size;
  const __nv_bfloat16* row = qkv + (static_cast<int64_t>(b) * seqlen_new + s) * qkv_stride;
  const __nv_bfloat16* k_src = row + num_heads * head_size;
  const __nv_bfloat16* v_src = k_src + num_kv_heads * head_size;

  // [b, 2, h, t, d]
  const int64_t head_block = static_cast<int64_t>(max_seq_len) * head_size;
  __nv_fp8_e4m3* k_dst = kv_cache + static_cast<int64_t>(b) * 2 * num_kv_heads * head_block;
  __nv_fp8_e4m3* v_dst = k_dst + num_kv_heads * head_block;

  const int chunks = num_kv_heads * head_size / kVec;
  for (int c = threadIdx.x; c < chunks; c += kThreads) {
    const int h = c * kVec / head_size;
    const int d = c * kVec - h * head_size;
    const int64_t dst = h * head_block + static_cast<int64_t>(pos) * head_size + d;
    const uint4 k_raw = *reinterpret_cast<const uint4*>(k_src + c * kVec);
    const uint4 v_raw = *reinterpret_cast<const uint4*>(v_src + c * kVec);
    *reinterpret_cast<uint2*>(k_dst + dst) = quantize_pack(k_raw, scale);
    *reinterpret_cast<uint2*>(v_dst + dst) = quantize_pack(v_raw, scale);
  }
}

}  // namespace kernels

// kv_cache: [batch, 2, num_kv_heads, max_seq_len, head_size] fp8 e4m3; qkv: [batch, seqlen_new, (num_heads + 2 *
// num_kv_heads) * head_size] bf16; cache_seqlens: [batch] int32, cache_seqlens[b] + seqlen_new <= max_seq_len;
// kv_scale_orig_quant: [1] fp32 (1 / the cache's dequantization scale). Device pointers, 16-byte aligned.
void invokeUpdateKVCacheLinearFp8(__nv_fp8_e4m3* kv_cache, const __nv_bfloat16* qkv, const int* cache_seqlens,
                                  const float* kv_scale_orig_quant, int batch, int seqlen_new, int num_heads,
                                  int num_kv_heads, int head_size, int max_seq_len, cudaStream_t stream) {
  if (batch == 0 || seqlen_new == 0) return;
  const dim3 grid(seqlen_new, batch);
  kernels::updateKVCacheLinearFp8Kernel<<<grid, kernels::kThreads, 0, stream>>>(
      kv_cache, qkv, cache_seqlens, kv_scale_orig_quant, num_heads, num_kv_heads, head_size, max_seq_len);
}
