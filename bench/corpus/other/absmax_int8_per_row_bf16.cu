// Dynamic per-token int8 quantization (bf16 input, one fp32 scale per row: scale = absmax / 127, 1 for a zero
// row), as done before W8A8 int8 GEMMs: one row per block of kThreads (a constexpr) threads, a shared-memory tree
// for the absolute maximum, round to nearest even, clamp.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

constexpr int kThreads = 256;

/* kerntune:
args  = ["out: out i8[tokens * hidden]", "scales: out f32[tokens]", "input: in bf16[tokens * hidden]",
         "hidden: i32 = hidden"]
sizes = [{ tokens = 8192, hidden = 8192 }, { tokens = 16, hidden = 14336 }, { tokens = 1000, hidden = 4099 }]
grid  = "tokens"
block = "256"
*/
__global__ void dynamic_scaled_int8_quant_kernel(int8_t* __restrict__ out, float* __restrict__ scales,
                                                 const __nv_bfloat16* __restrict__ input, int hidden) {
  __shared__ float red[kThreads];
  const long long base = (long long)blockIdx.x * hidden;
  float m = 0.f;
  for (int i = threadIdx.x; i < hidden; i += kThreads) m = fmaxf(m, fabsf(__bfloat162float(input[base + i])));
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float absmax = red[0];
  const float scale = absmax > 0.f ? absmax / 127.f : 1.f;
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  for (int i = threadIdx.x; i < hidden; i += kThreads) {
    int q = __float2int_rn(__bfloat162float(input[base + i]) / scale);
    q = max(-128, min(127, q));
    out[base + i] = (int8_t)q;
  }
}

void dynamic_scaled_int8_quant(int8_t* out, float* scales, const __nv_bfloat16* input, int tokens, int hidden,
                               cudaStream_t stream) {
  dynamic_scaled_int8_quant_kernel<<<tokens, kThreads, 0, stream>>>(out, scales, input, hidden);
}
