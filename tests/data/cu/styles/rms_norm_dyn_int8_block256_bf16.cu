// RMSNorm fused with dynamic per-token int8 quantization (vLLM's rms_norm_dynamic_per_token_quant instantiated for
// int8_t): bf16 rows, one row per block of a fixed 256 threads, the sum and the absolute maximum reduced through a
// shared-memory tree, the weighted row rounded as the unfused bf16 norm stores it (bf16(bf16(x * r) * w)), the scale
// max(min(amax, *ub) / 127, FLT_EPSILON) with ub a nullable one-element bound, the row divided by it and converted by
// cvt.rni.sat.s8.f32 (to nearest even, saturated to [-128, 127], no clamp of its own); the scales fp32, one per row.
// The weight and the bound come last, the row count from the grid.
#include <cuda_bf16.h>
#include <cfloat>
#include <stdint.h>
__device__ __forceinline__ int8_t to_int8_sat(float v) {
  uint32_t r;
  asm volatile("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(r) : "f"(v));
  return (int8_t)r;
}

/* kerntune:
args  = ["x: in bf16[rows * n]", "out: out i8[rows * n]", "token_scale: out f32[rows]", "n: i32 = n",
         "epsilon: f32 = 1e-6", "w: in bf16[n]", "ub: in f32[1] ~ uniform(2, 4)"]
sizes = [{ rows = 300, n = 2048 }, { rows = 5, n = 4099 }]
grid  = "rows"
block = "256"
atol  = 1
*/
__global__ void rms_norm_quant_int8(const __nv_bfloat16* __restrict__ x, int8_t* __restrict__ out,
                                    float* __restrict__ token_scale, int n, float epsilon,
                                    const __nv_bfloat16* __restrict__ w, const float* __restrict__ ub) {
  __shared__ float red[256];
  __shared__ float s_r, s_scale;
  const size_t base = (size_t)blockIdx.x * n;
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += 256) {
    const float v = __bfloat162float(x[base + i]);
    acc += v * v;
  }
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int o = 128; o; o >>= 1) {
    if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) s_r = rsqrtf(red[0] / (float)n + epsilon);
  __syncthreads();
  const float r = s_r;
  float amax = 0.f;
  for (int i = threadIdx.x; i < n; i += 256) {
    const float y = __bfloat162float(__float2bfloat16(__bfloat162float(x[base + i]) * r) * w[i]);
    amax = fmaxf(amax, fabsf(y));
  }
  red[threadIdx.x] = amax;
  __syncthreads();
  for (int o = 128; o; o >>= 1) {
    if (threadIdx.x < o) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + o]);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float m = ub ? fminf(red[0], *ub) : red[0];
    const float scale = fmaxf(m / 127.f, FLT_EPSILON);
    s_scale = scale;
    token_scale[blockIdx.x] = scale;
  }
  __syncthreads();
  const float scale = s_scale;
  for (int i = threadIdx.x; i < n; i += 256) {
    const float y = __bfloat162float(__float2bfloat16(__bfloat162float(x[base + i]) * r) * w[i]);
    out[base + i] = to_int8_sat(y / scale);
  }
}

void rms_norm_quant_int8_launch(const __nv_bfloat16* x, int8_t* out, float* token_scale, int rows, int n,
                                float epsilon, const __nv_bfloat16* w, const float* ub, cudaStream_t st) {
  rms_norm_quant_int8<<<rows, 256, 0, st>>>(x, out, token_scale, n, epsilon, w, ub);
}
