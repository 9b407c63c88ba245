// Blockwise NF4 quantization in the manner of bitsandbytes' non-CUDA backends (the CPU / XPU / HPU quantize_4bit: the
// code of a value is how many of the NF4 midpoints it exceeds, `out[scaled > table[i]] = i`, and the two codes of a
// byte are packed `q[1::2] << 4 | q[::2]`: the EVEN element in the LOW nibble), written as one CUDA kernel: bf16 input,
// one warp per quantization block of `blocksize` values (a runtime argument), two consecutive values a lane per step,
// the block's absmax by xor shuffles, values times 1 / absmax, the 15 midpoints (bitsandbytes' full-precision ones) in
// __constant__ memory searched by a counting loop; a short last block's missing value read as 0 and coded like any
// other; arguments (x, n, blocksize, packed, absmax).
#include <cuda_bf16.h>
#include <stdint.h>

__constant__ float kNf4Mid[15] = {-0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f,
                                  -0.33967943489551544f, -0.23460740596055984f, -0.13791173323988914f,
                                  -0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f,
                                  0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,
                                  0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f};

// the index of the NF4 level nearest v in [-1, 1]: how many midpoints v exceeds
__device__ __forceinline__ uint8_t nf4_index(float v) {
  uint8_t c = 0;
#pragma unroll
  for (int k = 0; k < 15; ++k) c += v > kNf4Mid[k];
  return c;
}

/* kerntune:
args  = ["x: in bf16[n]", "n: i64 = n", "blocksize: i32 = bs", "packed: out u8[cdiv(n, 2)]",
         "absmax: out f32[cdiv(n, bs)]"]
sizes = [{ n = 16777216, bs = 64 }, { n = 4099, bs = 128 }, { n = 1000002, bs = 64 }]
grid  = "cdiv(cdiv(n, bs), 8)"
block = 256
*/
__global__ void nf4_quantize_warp_blocks(const __nv_bfloat16* __restrict__ x, int64_t n, int blocksize,
                                         uint8_t* __restrict__ packed, float* __restrict__ absmax) {
  const int64_t blk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t start = blk * blocksize;
  if (start >= n) return;  // whole warps leave: the shuffles below keep the full mask
  const int len = (int)(n - start < blocksize ? n - start : blocksize);
  float amax = 0.f;
  for (int i = lane; i < len; i += 32) amax = fmaxf(amax, fabsf(__bfloat162float(x[start + i])));
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (lane == 0) absmax[blk] = amax;
  const float inv = 1.0f / amax;
  for (int p = lane; 2 * p < len; p += 32) {
    const float lo = __bfloat162float(x[start + 2 * p]) * inv;
    const float hi = (2 * p + 1 < len ? __bfloat162float(x[start + 2 * p + 1]) : 0.f) * inv;
    packed[start / 2 + p] = (uint8_t)(nf4_index(lo) | (nf4_index(hi) << 4));
  }
}

void nf4_quantize(const __nv_bfloat16* x, int64_t n, int blocksize, uint8_t* packed, float* absmax,
                  cudaStream_t stream) {
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  nf4_quantize_warp_blocks<<<(unsigned)((blocks + 7) / 8), 256, 0, stream>>>(x, n, blocksize, packed, absmax);
}
