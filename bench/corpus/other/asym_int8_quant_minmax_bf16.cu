// Per-token asymmetric int8 quantization of bf16 activations (zero point and scale per row, as asymmetric
// W8A8 schemes compute them): one block per token; each thread seeds its minimum and maximum with its first
// element and scans the rest of the row from tid + blockDim.x on, a shared-memory tree finds the row's range,
// then a second pass writes q = round(x / scale) + zero_point, clamped to [-128, 127].
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <math.h>

#define QUANT_THREADS 256

/* kerntune:
args  = ["q: out i8[tokens * hidden]", "scales: out f32[tokens]", "zero_points: out i32[tokens]",
         "x: in bf16[tokens * hidden]", "hidden: i32 = hidden"]
sizes = [{ tokens = 8192, hidden = 4096 }, { tokens = 4, hidden = 8192 }, { tokens = 777, hidden = 3001 }]
grid  = "tokens"
block = "256"
*/
__global__ void asym_int8_quant_kernel(int8_t* __restrict__ q, float* __restrict__ scales,
                                       int32_t* __restrict__ zero_points, const __nv_bfloat16* __restrict__ x,
                                       int hidden) {
  __shared__ float s_min[QUANT_THREADS];
  __shared__ float s_max[QUANT_THREADS];
  const int tid = threadIdx.x;
  const __nv_bfloat16* xr = x + (int64_t)blockIdx.x * hidden;
  int8_t* qr = q + (int64_t)blockIdx.x * hidden;

  float mn = INFINITY, mx = -INFINITY;
  if (tid < hidden) {
    mn = mx = __bfloat162float(xr[tid]);
  }
  for (int i = tid + blockDim.x; i < hidden; i += blockDim.x) {
    const float v = __bfloat162float(xr[i]);
    mn = fminf(mn, v);
    mx = fmaxf(mx, v);
  }
  s_min[tid] = mn;
  s_max[tid] = mx;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (tid < k) {
      s_min[tid] = fminf(s_min[tid], s_min[tid + k]);
      s_max[tid] = fmaxf(s_max[tid], s_max[tid + k]);
    }
    __syncthreads();
  }
  const float lo = fminf(s_min[0], 0.f), hi = fmaxf(s_max[0], 0.f);
  const float scale = fmaxf((hi - lo) / 255.f, 1e-8f);
  const int zp = (int)nearbyintf(-128.f - lo / scale);
  if (tid == 0) {
    scales[blockIdx.x] = scale;
    zero_points[blockIdx.x] = zp;
  }
  const float inv = 1.f / scale;
  for (int i = tid; i < hidden; i += blockDim.x) {
    const float v = nearbyintf(__bfloat162float(xr[i]) * inv) + (float)zp;
    qr[i] = (int8_t)fminf(fmaxf(v, -128.f), 127.f);
  }
}

void asym_int8_quant(int8_t* q, float* scales, int32_t* zero_points, const __nv_bfloat16* x, int tokens, int hidden,
                     cudaStream_t stream) {
  asym_int8_quant_kernel<<<tokens, QUANT_THREADS, 0, stream>>>(q, scales, zero_points, x, hidden);
}
