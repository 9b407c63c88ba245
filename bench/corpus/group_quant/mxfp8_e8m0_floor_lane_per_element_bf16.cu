// MXFP8 quantization (OCP Microscaling: blocks of 32 elements along the row sharing one power-of-two E8M0 scale),
// as the torchao MX reference cast (to_mx, FLOOR scale mode) and the Transformer Engine / vLLM MXFP8 activation
// quantizers produce it for a Blackwell-format MXFP8 GEMM: bf16 x [tokens, hidden] to fp8 e4m3 q [tokens, hidden]
// and uint8 scales [tokens, hidden / 32], row-major (not yet swizzled for the GEMM):
//   amax   = max |x| over the 32 elements
//   e      = floor(log2(amax)) - 8          (8 = floor(log2(448)), the largest power of two of e4m3)
//   scale  = 2^e, stored as its biased exponent byte e + 127 clamped to [0, 254] (amax = 0 gives the byte 0)
//   q      = e4m3(clamp(x / scale, -448, 448))   (with FLOOR the block's largest values land in [256, 512) and the
//            ones above 448 saturate)
// floor(log2(amax)) is read from the float's exponent bits, the division by the power of two is exact.
// Launch: one element per lane, one warp per 32-element block (the block's amax by a full-mask xor butterfly,
// lane 0 writing the scale byte), 8 MX blocks per CTA of 256 threads, a flat grid over all tokens * hidden / 32 MX
// blocks (token-major, so the block index is also the scale's index); scalar bf16 loads and fp8 byte stores.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

namespace mx {

constexpr int kBlockSize = 32;   // elements sharing a scale
constexpr int kBlocksPerCta = 8;  // one warp each
constexpr int kThreads = kBlockSize * kBlocksPerCta;
constexpr int kE4m3MaxPow2 = 8;
constexpr float kE4m3Max = 448.0f;

/* kerntune:
args  = ["x: in bf16[tokens * hidden]", "q: out u8[tokens * hidden]", "scales: out u8[tokens * hidden / 32]",
         "num_blocks: i64 = tokens * hidden / 32"]
sizes = [{ tokens = 8192, hidden = 7168 }, { tokens = 8, hidden = 7168 }, { tokens = 37, hidden = 2080 }]
grid  = "cdiv(tokens * hidden / 32, 8)"
block = 256
*/
__global__ void mxfp8_quantize_kernel(const __nv_bfloat16* __restrict__ x, __nv_fp8_storage_t* __restrict__ q,
                                      uint8_t* __restrict__ scales, const int64_t num_blocks) {
  const int64_t block = static_cast<int64_t>(blockIdx.x) * kBlocksPerCta + threadIdx.x / kBlockSize;
  const int lane = threadIdx.x % kBlockSize;
  if (block >= num_blocks) return;  // the whole warp leaves together

  const int64_t i = block * kBlockSize + lane;
  const float v = __bfloat162float(x[i]);

  float amax = fabsf(v);
#pragma unroll
  for (int mask = kBlockSize / 2; mask > 0; mask >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, mask));
  }

  int biased_exp = 0;
  if (amax > 0.0f) {
    const int amax_exp = static_cast<int>((__float_as_uint(amax) >> 23) & 0xff) - 127;  // floor(log2(amax))
    biased_exp = min(max(amax_exp - kE4m3MaxPow2 + 127, 0), 254);
  }
  const float scale = exp2f(static_cast<float>(biased_exp - 127));

  const float scaled = fminf(fmaxf(v / scale, -kE4m3Max), kE4m3Max);
  q[i] = __nv_cvt_float_to_fp8(scaled, __NV_SATFINITE, __NV_E4M3);
  if (lane == 0) {
    scales[block] = static_cast<uint8_t>(biased_exp);
  }
}

}  // namespace mx

// x: [tokens, hidden] bf16; q: [tokens, hidden] fp8 e4m3 bytes; scales: [tokens, hidden / 32] E8M0 bytes. Device
// pointers; hidden a multiple of 32.
void mxfp8_quantize(const __nv_bfloat16* x, __nv_fp8_storage_t* q, uint8_t* scales, int64_t tokens, int64_t hidden,
                    cudaStream_t stream) {
  const int64_t num_blocks = tokens * hidden / mx::kBlockSize;
  if (num_blocks == 0) return;
  const dim3 grid(static_cast<unsigned>((num_blocks + mx::kBlocksPerCta - 1) / mx::kBlocksPerCta));
  mx::mxfp8_quantize_kernel<<<grid, mx::kThreads, 0, stream>>>(x, q, scales, num_blocks);
}
