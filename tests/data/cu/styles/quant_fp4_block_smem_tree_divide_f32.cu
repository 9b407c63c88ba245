// Blockwise FP4 quantization with bitsandbytes' 4-bit float codes (dQuantizeFP4: the sign in bit 3, the magnitude by a
// tree on the midpoints of its levels {0, 0.0625, 2, 3, 4, 6, 8, 12} / 12, codes 0, 1, 6, 7, 4, 5, 2, 3; the EVEN
// element in the HIGH nibble, as its CUDA kernels pack), written in another style: fp32 input, one thread block per
// quantization block of BLOCK = 128 values (a template argument), two consecutive values a thread, the absmax by a
// shared-memory tree, each value DIVIDED by the absmax, the tree written with ?:; arguments (absmax, q, x, n).
#include <stdint.h>

// the FP4 code of v in [-1, 1]
__device__ __forceinline__ uint32_t fp4_code(float v) {
  const uint32_t sign = v < 0.f ? 8u : 0u;
  const float mag = fabsf(v);
  uint32_t m;
  if (mag > 0.29166667f)
    m = mag > 0.583333f ? (mag > 0.8333333f ? 3u : 2u) : (mag > 0.4166667f ? 5u : 4u);
  else
    m = mag > 0.0859375f ? (mag > 0.20833333f ? 7u : 6u) : (mag > 0.00260417f ? 1u : 0u);
  return sign | m;
}

/* kerntune:
args  = ["absmax: out f32[cdiv(n, 128)]", "q: out u8[cdiv(n, 2)]", "x: in f32[n]", "n: i32 = n"]
sizes = [{ n = 8388608 }, { n = 70001 }, { n = 4096 }]
grid  = "cdiv(n, 128)"
block = 64
template_args = ["128"]
*/
template <int BLOCK>
__global__ void fp4_quantize_blocks(float* __restrict__ absmax, uint8_t* __restrict__ q, const float* __restrict__ x,
                                    int n) {
  __shared__ float red[BLOCK / 2];
  const int t = threadIdx.x;
  const long long i0 = (long long)blockIdx.x * BLOCK + 2 * t;
  const float a = i0 < n ? x[i0] : 0.f;
  const float b = i0 + 1 < n ? x[i0 + 1] : 0.f;
  red[t] = fmaxf(fabsf(a), fabsf(b));
  __syncthreads();
  for (int s = BLOCK / 4; s > 0; s >>= 1) {
    if (t < s) red[t] = fmaxf(red[t], red[t + s]);
    __syncthreads();
  }
  const float amax = red[0];
  if (t == 0) absmax[blockIdx.x] = amax;
  if (i0 < n) q[i0 / 2] = (uint8_t)((fp4_code(a / amax) << 4) | fp4_code(b / amax));
}

void fp4_quantize(const float* x, uint8_t* q, float* absmax, int n, cudaStream_t stream) {
  fp4_quantize_blocks<128><<<(n + 127) / 128, 64, 0, stream>>>(absmax, q, x, n);
}
