// per-token-group fp8 e4m3 quantization (stored as bytes), fp16 input, eps a literal, scales per group
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
/* kerntune:
args  = ["inp: in f16[T * N]", "outq: out u8[T * N]", "s: out f32[T * N / 64]", "gsize: i32 = 64"]
sizes = [{ T = 128, N = 4096 }, { T = 7, N = 1024 }]
grid  = "T * N / 64"
block = "64"
*/
__global__ void quant_fp8(const __half* inp, uint8_t* outq, float* s, int gsize) {
  __shared__ float red[64];
  const __half* g = inp + (size_t)blockIdx.x * gsize;
  float a = 0.f;
  for (int i = threadIdx.x; i < gsize; i += 64) a = fmaxf(a, fabsf(__half2float(g[i])));
  red[threadIdx.x] = a;
  __syncthreads();
  for (int k = 32; k > 0; k >>= 1) { if (threadIdx.x < k) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + k]); __syncthreads(); }
  float sc = fmaxf(red[0], 1e-10f) / 448.f;
  if (threadIdx.x == 0) s[blockIdx.x] = sc;
  for (int i = threadIdx.x; i < gsize; i += 64)
    outq[(size_t)blockIdx.x * gsize + i] = (uint8_t)__nv_cvt_float_to_fp8(__half2float(g[i]) / sc, __NV_SATFINITE, __NV_E4M3);
}

void quant_groups_fp8(const __half* inp, uint8_t* outq, float* s, int T, int N, cudaStream_t stream) {
  quant_fp8<<<T * N / 64, 64, 0, stream>>>(inp, outq, s, 64);
}
