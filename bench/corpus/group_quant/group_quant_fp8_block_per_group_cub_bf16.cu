// Per-token-group FP8 (e4m3) cast of activations for block-scaled FP8 GEMMs, written as a direct CUDA port of the
// PyTorch reference that DeepGEMM's tests quantize with (per_token_cast_to_fp8):
//   amax  = max(max |x| over the group of 128, 1e-4)
//   x_fp8 = e4m3(x * (448 / amax)),  x_scale = amax / 448
// i.e. the quantized value is x times the factor 448 / amax (not x divided by the stored scale). x is bf16
// [num_tokens, hidden], hidden a multiple of the group size; x_scale is fp32 [num_tokens, hidden / 128] row-major.
// The naive launch: one block per group with one thread per element (block = GROUP_SIZE, a template parameter,
// 128; the host also instantiates 64), a flat grid over all num_tokens * hidden / GROUP_SIZE groups, and no sizes
// passed to the kernel. The group's amax is a cub::BlockReduce with a max functor, handed from thread 0 to the
// block through shared memory; thread 0 also writes the scale. The conversion is __nv_cvt_float_to_fp8 with
// saturation to the finite range (|x * 448 / amax| never exceeds 448 by more than a rounding, which e4m3 rounds to
// 448 anyway).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cub/block/block_reduce.cuh>
#include <cassert>
#include <cstdint>

constexpr float kFp8E4m3Max = 448.0f;
constexpr float kAmaxFloor = 1e-4f;

struct AbsMaxOp {
  __device__ __forceinline__ float operator()(const float a, const float b) const { return fmaxf(a, b); }
};

/* kerntune:
args  = ["x: in bf16[num_tokens * hidden]", "x_fp8: out u8[num_tokens * hidden]",
         "x_scale: out f32[num_tokens * hidden / 128]"]
sizes = [{ num_tokens = 8192, hidden = 7168 }, { num_tokens = 8, hidden = 7168 }, { num_tokens = 1001, hidden = 2048 }]
grid  = "num_tokens * hidden / 128"
block = 128
template_args = ["128"]
*/
template <int GROUP_SIZE>
__global__ void per_token_group_cast_to_fp8_kernel(const __nv_bfloat16* __restrict__ x,
                                                   __nv_fp8_storage_t* __restrict__ x_fp8,
                                                   float* __restrict__ x_scale) {
  using BlockReduce = cub::BlockReduce<float, GROUP_SIZE>;
  __shared__ typename BlockReduce::TempStorage temp_storage;
  __shared__ float s_amax;

  const int64_t group = blockIdx.x;
  const int64_t idx = group * GROUP_SIZE + threadIdx.x;
  const float v = __bfloat162float(x[idx]);

  const float amax = BlockReduce(temp_storage).Reduce(fabsf(v), AbsMaxOp());  // valid in thread 0
  if (threadIdx.x == 0) {
    const float clamped = fmaxf(amax, kAmaxFloor);
    s_amax = clamped;
    x_scale[group] = clamped / kFp8E4m3Max;
  }
  __syncthreads();

  x_fp8[idx] = __nv_cvt_float_to_fp8(v * (kFp8E4m3Max / s_amax), __NV_SATFINITE, __NV_E4M3);
}

// x: [num_tokens, hidden] bf16; x_fp8: [num_tokens, hidden] e4m3 bytes; x_scale: [num_tokens, hidden / group_size]
// fp32. Device pointers; hidden must be a multiple of group_size (64 or 128).
void per_token_group_cast_to_fp8(const __nv_bfloat16* x, __nv_fp8_storage_t* x_fp8, float* x_scale, int num_tokens,
                                 int hidden, int group_size, cudaStream_t stream) {
  assert(hidden % group_size == 0);
  const int64_t num_groups = static_cast<int64_t>(num_tokens) * (hidden / group_size);
  if (num_groups == 0) return;
  const dim3 grid(static_cast<unsigned>(num_groups));
  if (group_size == 128) {
    per_token_group_cast_to_fp8_kernel<128><<<grid, 128, 0, stream>>>(x, x_fp8, x_scale);
  } else if (group_size == 64) {
    per_token_group_cast_to_fp8_kernel<64><<<grid, 64, 0, stream>>>(x, x_fp8, x_scale);
  } else {
    assert(false && "per_token_group_cast_to_fp8: group_size must be 64 or 128");
  }
}
