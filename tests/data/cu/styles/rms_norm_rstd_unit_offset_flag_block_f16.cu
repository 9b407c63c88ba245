// RMSNorm that also stores each row's reciprocal RMS for the backward pass, in another style than Transformer
// Engine's: fp16 rows and an fp16 weight, one row per 256-thread block (the row count is the grid), a shared-memory
// tree reduction, the reciprocal taken by thread 0 and published through shared memory; an int argument selects
// the Gemma-style weight (1 + w) with a ternary. Arguments in the order (x, w, out, rstd, hidden, eps, flag); the
// math in fp32, one rounding at the store: out = half((x * r) * g).
#include <cuda_fp16.h>
/* kerntune:
args  = ["x: in f16[T * H]", "w: in f16[H]", "out: out f16[T * H]", "rstd: out f32[T]", "H: i32 = H",
         "eps: f32 = 1e-6", "add_unit_offset: i32 = 1"]
sizes = [{ T = 64, H = 2048 }, { T = 7, H = 3000 }]
grid  = "T"
block = "256"
*/
__global__ void rms_norm_rstd_unit_offset(const __half* __restrict__ x, const __half* __restrict__ w,
                                          __half* __restrict__ out, float* __restrict__ rstd, int H, float eps,
                                          int add_unit_offset) {
  __shared__ float red[256];
  __shared__ float s_r;
  const __half* xr = x + (size_t)blockIdx.x * H;
  __half* yr = out + (size_t)blockIdx.x * H;
  float acc = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float v = __half2float(xr[i]);
    acc += v * v;
  }
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    s_r = rsqrtf(red[0] / (float)H + eps);
    rstd[blockIdx.x] = s_r;
  }
  __syncthreads();
  const float r = s_r;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float g = add_unit_offset ? 1.0f + __half2float(w[i]) : __half2float(w[i]);
    yr[i] = __float2half((__half2float(xr[i]) * r) * g);
  }
}

void rms_norm_rstd_unit_offset_launch(const __half* x, const __half* w, __half* out, float* rstd, int T, int H,
                                      float eps, int add_unit_offset, cudaStream_t st) {
  rms_norm_rstd_unit_offset<<<T, 256, 0, st>>>(x, w, out, rstd, H, eps, add_unit_offset);
}
