// Dynamic per-token int8 quantization as vLLM's dynamic_scaled_int8_quant writes it: one token per block of
// min(hidden, 256) threads, the input first, fp16; the absolute maximum by warp shuffles and one slot a warp, the
// scale absmax / 127 stored, the values multiplied by the factor 127 / absmax (0 for an all-zero row) and converted
// by cvt.rni.sat.s8.f32 (to nearest even, saturated). A row of 4096 or more: longer than a warp segment holds.
#include <cuda_fp16.h>
#include <cstdint>

__device__ __forceinline__ int8_t to_int8_rn_sat(float x) {
  uint32_t dst;
  asm volatile("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(dst) : "f"(x));
  return reinterpret_cast<const int8_t&>(dst);
}

/* kerntune:
args  = ["input: in f16[num_tokens * hidden_size]", "output: out i8[num_tokens * hidden_size]",
         "scale_out: out f32[num_tokens]", "hidden_size: i32 = hidden_size"]
sizes = [{ num_tokens = 4096, hidden_size = 4096 }, { num_tokens = 13, hidden_size = 14336 }, { num_tokens = 300, hidden_size = 5003 }]
grid  = "num_tokens"
block = "min(hidden_size, 256)"
*/
__global__ void dynamic_int8_per_token(const __half* __restrict__ input, int8_t* __restrict__ output,
                                       float* __restrict__ scale_out, const int hidden_size) {
  __shared__ float warp_max[32];
  __shared__ float row_absmax;
  const int tid = threadIdx.x;
  const __half* row_in = input + (int64_t)blockIdx.x * hidden_size;
  int8_t* row_out = output + (int64_t)blockIdx.x * hidden_size;

  float thread_max = 0.f;
  for (int i = tid; i < hidden_size; i += blockDim.x) thread_max = fmaxf(thread_max, fabsf(__half2float(row_in[i])));
  for (int o = 16; o > 0; o >>= 1) thread_max = fmaxf(thread_max, __shfl_xor_sync(0xffffffffu, thread_max, o));
  if ((tid & 31) == 0) warp_max[tid >> 5] = thread_max;
  __syncthreads();
  if (tid == 0) {
    float m = 0.f;
    for (int w = 0; w < (int)(blockDim.x + 31) / 32; ++w) m = fmaxf(m, warp_max[w]);
    row_absmax = m;
    scale_out[blockIdx.x] = m / 127.f;
  }
  __syncthreads();
  const float absmax = row_absmax;
  const float inv_s = (absmax == 0.f) ? 0.f : 127.f / absmax;
  for (int i = tid; i < hidden_size; i += blockDim.x) row_out[i] = to_int8_rn_sat(__half2float(row_in[i]) * inv_s);
}

void dynamic_scaled_int8_quant(const __half* input, int8_t* output, float* scale_out, int num_tokens, int hidden_size,
                               cudaStream_t stream) {
  const int block = hidden_size < 256 ? hidden_size : 256;
  dynamic_int8_per_token<<<num_tokens, block, 0, stream>>>(input, output, scale_out, hidden_size);
}
