// MXFP8 E5M2 (OCP MX, torchao's to_mx with float8_e5m2, the FLOOR mode): blocks of 32 bf16 values, a warp per block
// of 32 (one value a lane), the shared exponent the floor of log2(amax) read from the float's exponent field, less
// emax = 15 of e5m2, biased and clamped to [0, 254], stored as an E8M0 byte; the values divided by 2^(e - 127)
// (exact) and converted with __nv_cvt_float_to_fp8(..., __NV_SATFINITE, __NV_E5M2). The count of blocks, then the
// bytes, then the data.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

/* kerntune:
args  = ["n_blocks: i32 = n / 32", "scales_e8m0: out u8[n / 32]", "out: out u8[n]", "in: in bf16[n]"]
sizes = [{ n = 16777216 }, { n = 96 }]
grid  = "cdiv(n / 32, 8)"
block = "256"
*/
__global__ void mx_e5m2_quant(int n_blocks, uint8_t* __restrict__ scales_e8m0, uint8_t* __restrict__ out,
                              const __nv_bfloat16* __restrict__ in) {
  const int blk = blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (blk >= n_blocks) return;
  const float v = __bfloat162float(in[(int64_t)blk * 32 + lane]);
  float amax = fabsf(v);
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const int exp_field = (int)((__float_as_uint(amax) >> 23) & 0xff);
  int biased = exp_field - 15;  // floor(log2(amax)) - emax + 127, from the exponent field
  biased = biased < 0 ? 0 : (biased > 254 ? 254 : biased);
  if (lane == 0) scales_e8m0[blk] = (uint8_t)biased;
  const float scale = exp2f((float)(biased - 127));
  out[(int64_t)blk * 32 + lane] = (uint8_t)__nv_cvt_float_to_fp8(v / scale, __NV_SATFINITE, __NV_E5M2);
}

void mx_quantize_e5m2(const __nv_bfloat16* in, uint8_t* out, uint8_t* scales_e8m0, int n, cudaStream_t stream) {
  const int n_blocks = n / 32;
  mx_e5m2_quant<<<(n_blocks + 7) / 8, 256, 0, stream>>>(n_blocks, scales_e8m0, out, in);
}
