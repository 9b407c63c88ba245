// Per-token-group int8 quantization (fp16 input, one fp32 scale per group, scale = max(absmax, eps) / 127), one
// warp per group with a grid-stride loop over the groups: 256 threads (8 warps) per block and grid =
// min(ceil(num_groups * 32 / 256), 2048). Round to nearest even, clamp to [-128, 127].
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

/* kerntune:
args  = ["x: in f16[tokens * hidden]", "xq: out i8[tokens * hidden]", "x_s: out f32[tokens * hidden / 128]",
         "num_groups: i64 = tokens * hidden / 128", "group_size: i32 = 128", "eps: f32 = 1e-10"]
sizes = [{ tokens = 8192, hidden = 8192 }, { tokens = 64, hidden = 4096 }, { tokens = 1023, hidden = 5120 }]
grid  = "min(cdiv(tokens * hidden / 128 * 32, 256), 2048)"
block = "256"
*/
__global__ void per_token_group_quant_int8_warp(const __half* __restrict__ x, int8_t* __restrict__ xq,
                                                float* __restrict__ x_s, long long num_groups, int group_size,
                                                float eps) {
  const int lane = threadIdx.x & 31;
  const long long warp_id = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const long long num_warps = ((long long)gridDim.x * blockDim.x) >> 5;
  for (long long g = warp_id; g < num_groups; g += num_warps) {
    const __half* src = x + g * group_size;
    int8_t* dst = xq + g * group_size;
    float amax = eps;
    for (int i = lane; i < group_size; i += 32) amax = fmaxf(amax, fabsf(__half2float(src[i])));
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, mask));
    const float scale = amax / 127.0f;
    for (int i = lane; i < group_size; i += 32) {
      int v = __float2int_rn(__half2float(src[i]) / scale);
      v = min(max(v, -128), 127);
      dst[i] = static_cast<int8_t>(v);
    }
    if (lane == 0) x_s[g] = scale;
  }
}

void per_token_group_quant_int8(const __half* x, int8_t* xq, float* x_s, int tokens, int hidden, int group_size,
                                float eps, cudaStream_t stream) {
  const long long num_groups = (long long)tokens * hidden / group_size;
  const int threads = 256;
  const int blocks = (int)std::min<long long>((num_groups * 32 + threads - 1) / threads, 2048);
  per_token_group_quant_int8_warp<<<blocks, threads, 0, stream>>>(x, xq, x_s, num_groups, group_size, eps);
}
