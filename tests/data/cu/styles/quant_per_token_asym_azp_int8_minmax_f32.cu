// Per-token asymmetric int8 quantization with an integer zero point as vLLM's dynamic_scaled_int8_azp_quant writes
// it: fp32 input, one token per block of 256, the row's minimum and maximum by one shared-memory tree each, scale =
// (max - min) / 255 and azp = nearbyintf(-128 - min / scale) (to nearest even) from thread 0, both stored (the zero
// point an int32), then q = saturate(rn(x * (1 / scale)) + azp) to [-128, 127].
#include <cstdint>
#include <cfloat>

#define AZP_THREADS 256

/* kerntune:
args  = ["input: in f32[tokens * hidden]", "out: out i8[tokens * hidden]", "scale: out f32[tokens]",
         "azp: out i32[tokens]", "hidden: i32 = hidden"]
sizes = [{ tokens = 2048, hidden = 8192 }, { tokens = 3, hidden = 4097 }]
grid  = "tokens"
block = "256"
*/
__global__ void dynamic_azp_quant(const float* __restrict__ input, int8_t* __restrict__ out,
                                  float* __restrict__ scale, int32_t* __restrict__ azp, const int hidden) {
  __shared__ float s_min[AZP_THREADS];
  __shared__ float s_max[AZP_THREADS];
  __shared__ float s_scale;
  __shared__ int32_t s_azp;
  const int tid = threadIdx.x;
  const float* row = input + (int64_t)blockIdx.x * hidden;
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (int i = tid; i < hidden; i += AZP_THREADS) {
    const float v = row[i];
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
  }
  s_min[tid] = lo;
  s_max[tid] = hi;
  __syncthreads();
  for (int s = AZP_THREADS / 2; s > 0; s >>= 1) {
    if (tid < s) {
      s_min[tid] = fminf(s_min[tid], s_min[tid + s]);
      s_max[tid] = fmaxf(s_max[tid], s_max[tid + s]);
    }
    __syncthreads();
  }
  if (tid == 0) {
    const float sc = (s_max[0] - s_min[0]) / 255.f;
    const float zp = nearbyintf(-128.f - s_min[0] / sc);
    s_scale = sc;
    s_azp = (int32_t)zp;
    scale[blockIdx.x] = sc;
    azp[blockIdx.x] = (int32_t)zp;
  }
  __syncthreads();
  const float inv_s = 1.f / s_scale;
  const int32_t zp = s_azp;
  int8_t* row_out = out + (int64_t)blockIdx.x * hidden;
  for (int i = tid; i < hidden; i += AZP_THREADS) {
    int32_t qi = __float2int_rn(row[i] * inv_s) + zp;
    qi = qi < -128 ? -128 : (qi > 127 ? 127 : qi);
    row_out[i] = (int8_t)qi;
  }
}

void dynamic_scaled_int8_azp_quant(const float* input, int8_t* out, float* scale, int32_t* azp, int tokens,
                                   int hidden, cudaStream_t stream) {
  dynamic_azp_quant<<<tokens, AZP_THREADS, 0, stream>>>(input, out, scale, azp, hidden);
}
