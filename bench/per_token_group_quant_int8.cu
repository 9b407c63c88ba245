// Per-token-group int8 quantization (bf16 input, groups of group_size along the hidden dimension, one fp32 scale
// per group), as used before int8 GEMMs. Written the way it starts out: one group per block of 128 threads,
// scalar loads, a shared-memory tree reduction for the absolute maximum.
#include <cuda_bf16.h>
#include <stdint.h>

/* kerntune:
args  = ["x: in bf16[tokens * hidden]", "q: out i8[tokens * hidden]", "scales: out f32[tokens * hidden / 128]",
         "group_size: i32 = 128", "num_groups: i32 = tokens * hidden / 128", "eps: f32 = 1e-10"]
sizes = [{ tokens = 4096, hidden = 4096 }, { tokens = 8192, hidden = 14336 }, { tokens = 16, hidden = 7168 },
         { tokens = 1000, hidden = 5120 }]
grid  = "tokens * hidden / 128"
block = "128"
*/
__global__ void per_token_group_quant_int8_kernel(const __nv_bfloat16* x, int8_t* q, float* scales, int group_size,
                                                  int num_groups, float eps) {
  __shared__ float red[128];
  const int g = blockIdx.x;
  if (g >= num_groups) return;
  const long long base = (long long)g * group_size;
  float m = 0.f;
  for (int i = threadIdx.x; i < group_size; i += 128) m = fmaxf(m, fabsf(__bfloat162float(x[base + i])));
  red[threadIdx.x] = m;
  __syncthreads();
  for (int k = 64; k > 0; k >>= 1) {
    if (threadIdx.x < k) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + k]);
    __syncthreads();
  }
  const float scale = fmaxf(red[0], eps) / 127.f;
  if (threadIdx.x == 0) scales[g] = scale;
  for (int i = threadIdx.x; i < group_size; i += 128) {
    const float v = fminf(fmaxf(__bfloat162float(x[base + i]) / scale, -128.f), 127.f);
    q[base + i] = (int8_t)__float2int_rn(v);
  }
}

void per_token_group_quant_int8(const __nv_bfloat16* x, int8_t* q, float* scales, int tokens, int hidden,
                                float eps, cudaStream_t stream) {
  const int num_groups = tokens * hidden / 128;
  per_token_group_quant_int8_kernel<<<num_groups, 128, 0, stream>>>(x, q, scales, 128, num_groups, eps);
}
