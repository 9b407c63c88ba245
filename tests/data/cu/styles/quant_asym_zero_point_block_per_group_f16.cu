// Per-group asymmetric uint8 quantization with an integer zero point (AWQ's zeros = -round(min / scale), in the
// form of vLLM's azp quantization): fp16 input, a block of 64 threads per group of 64 (one element a thread), the
// group's minimum and maximum by a shared-memory tree of comparisons, the scales (fp32) and the zero points (int32)
// in two arrays, written before the values; q = round(x / scale) + zero point, clamped to [0, 255].
#include <cuda_fp16.h>

/* kerntune:
args  = ["zp: out i32[n / 64]", "x: in f16[n]", "out: out u8[n]", "scale: out f32[n / 64]", "n: i32 = n"]
sizes = [{ n = 1048576 }, { n = 8192 }, { n = 64064 }]
grid  = "n / 64"
block = "64"
*/
__global__ void asym_quant_zp(int* zp, const __half* __restrict__ x, unsigned char* __restrict__ out, float* scale,
                              int n) {
  __shared__ float lo[64], hi[64];
  const int t = threadIdx.x;
  const int base = blockIdx.x * 64;
  const float v = __half2float(x[base + t]);
  lo[t] = v;
  hi[t] = v;
  __syncthreads();
  for (int s = 32; s > 0; s >>= 1) {
    if (t < s) {
      if (lo[t + s] < lo[t]) lo[t] = lo[t + s];
      if (hi[t + s] > hi[t]) hi[t] = hi[t + s];
    }
    __syncthreads();
  }
  const float mn = lo[0], mx = hi[0];
  const float d = fmaxf(mx - mn, 1e-6f) / 255.f;
  const float z = nearbyintf(-mn / d);
  if (t == 0) {
    scale[blockIdx.x] = d;
    zp[blockIdx.x] = (int)z;
  }
  const float level = nearbyintf(v / d) + z;
  out[base + t] = (unsigned char)fminf(fmaxf(level, 0.f), 255.f);
}

void asym_quant_zp_launch(int* zp, const __half* x, unsigned char* out, float* scale, int n, cudaStream_t stream) {
  asym_quant_zp<<<n / 64, 64, 0, stream>>>(zp, x, out, scale, n);
}
