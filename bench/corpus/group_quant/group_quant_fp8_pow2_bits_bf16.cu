// Per-token-group FP8 quantization with power-of-two scales computed on the bits, the way DeepGEMM-style utilities
// round a scale up to a power of two (the exponent of the float, bumped when any mantissa bit is set), row-major
// scales [tokens, hidden / group_size], bf16 input, the fp8 output typed as __nv_fp8_e4m3. One block of 8 groups,
// 16 lanes a group, an explicit group count, a grid-stride loop over group blocks.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <algorithm>

static constexpr int kGroupsPerBlock = 8;
static constexpr int kLanes = 16;

__device__ __forceinline__ float round_up_pow2(float v) {  // v > 0, finite
  int bits = __float_as_int(v);
  if (bits & 0x007fffff) bits = (bits & 0x7f800000) + 0x00800000;
  return __int_as_float(bits & 0x7f800000);
}

/* kerntune:
args  = ["in: in bf16[num_groups * 128]", "out: out u8[num_groups * 128]", "out_scale: out f32[num_groups]",
         "num_groups: i32 = num_groups", "group_size: i32 = 128", "min_scale: f32 = 1e-10"]
sizes = [{ num_groups = 458752 }, { num_groups = 1792 }, { num_groups = 11011 }]
grid  = "min(cdiv(num_groups, 8), 2048)"
block = "128"
*/
__global__ void quant_fp8_pow2_kernel(const __nv_bfloat16* __restrict__ in, __nv_fp8_e4m3* __restrict__ out,
                                      float* __restrict__ out_scale, int num_groups, int group_size, float min_scale) {
  const int lane = threadIdx.x % kLanes;
  for (int g = blockIdx.x * kGroupsPerBlock + threadIdx.x / kLanes; g < num_groups; g += gridDim.x * kGroupsPerBlock) {
    const __nv_bfloat16* src = in + (size_t)g * group_size;
    float amax = 0.f;
    for (int i = lane; i < group_size; i += kLanes) amax = fmaxf(amax, fabsf(__bfloat162float(src[i])));
    // the group's own lanes: at the end of the loop the other half of the warp may have left it
    const unsigned group_mask = ((1u << kLanes) - 1u) << (threadIdx.x % 32 / kLanes * kLanes);
    for (int o = kLanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(group_mask, amax, o, kLanes));
    const float scale = round_up_pow2(fmaxf(amax, min_scale) / 448.f);
    for (int i = lane; i < group_size; i += kLanes)
      out[(size_t)g * group_size + i] = __nv_fp8_e4m3(__bfloat162float(src[i]) / scale);
    if (lane == 0) out_scale[g] = scale;
  }
}

void quant_fp8_pow2(const __nv_bfloat16* in, __nv_fp8_e4m3* out, float* out_scale, int num_groups, int group_size,
                    float min_scale, cudaStream_t stream) {
  const int blocks = std::min((num_groups + kGroupsPerBlock - 1) / kGroupsPerBlock, 2048);
  quant_fp8_pow2_kernel<<<blocks, kGroupsPerBlock * kLanes, 0, stream>>>(in, out, out_scale, num_groups, group_size,
                                                                         min_scale);
}
