// RMSNorm with fp8 e4m3 output by a static per-tensor scale on the device (vLLM's rms_norm_static_fp8_quant), fp16,
// fewer blocks than rows walking them grid-stride, a shared-memory tree over 128 threads, the output typed
// __nv_fp8_e4m3, eps the last argument. As vLLM rounds it: the normalized value rounded to fp16, times the weight in
// fp16 (a __half product), then times the scale's reciprocal (taken once per thread), clamped and converted by the
// fp8 type's constructor.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
/* kerntune:
args  = ["x: in f16[T * H]", "w: in f16[H]", "y: out u8[T * H]", "s: in f32[1] ~ uniform(0.5, 2)", "T: i32 = T",
         "H: i32 = H", "eps: f32 = 1e-6"]
sizes = [{ T = 64, H = 5120 }, { T = 7, H = 999 }]
grid  = "(T + 1) / 2"
block = "128"
atol  = 1
*/
__global__ void rmsnorm_fp8_out(const __half* __restrict__ x, const __half* __restrict__ w,
                                __nv_fp8_e4m3* __restrict__ y, const float* __restrict__ s, int T, int H, float eps) {
  __shared__ float red[128];
  const float inv_s = 1.0f / __ldg(s);
  for (int t = blockIdx.x; t < T; t += gridDim.x) {
    const __half* xr = x + (size_t)t * H;
    float acc = 0.f;
    for (int i = threadIdx.x; i < H; i += 128) {
      const float v = __half2float(xr[i]);
      acc += v * v;
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int o = 64; o; o >>= 1) {
      if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
      __syncthreads();
    }
    const float rstd = rsqrtf(red[0] / (float)H + eps);
    __syncthreads();  // red is reused by the next row
    for (int i = threadIdx.x; i < H; i += 128) {
      const float n = __half2float(__float2half(__half2float(xr[i]) * rstd) * w[i]);
      y[(size_t)t * H + i] = __nv_fp8_e4m3(fmaxf(-448.f, fminf(n * inv_s, 448.f)));
    }
  }
}

void rmsnorm_fp8_out_launch(const __half* x, const __half* w, __nv_fp8_e4m3* y, const float* s, int T, int H,
                            float eps, cudaStream_t st) {
  rmsnorm_fp8_out<<<(T + 1) / 2, 128, 0, st>>>(x, w, y, s, T, H, eps);
}
