// Per-token-group FP8 (e4m3) quantization, bf16 input, one fp32 scale per group of group_size elements, in the style
// of SGLang's / vLLM's per_token_group_quant_8bit: 16 threads per group, groups_per_block picked by the host from
// the largest of 16/8/4/2/1 that divides the number of groups, the absolute maximum (seeded with eps) reduced with
// xor shuffles inside each half-warp, scale = absmax / fp8_max, q = clamp(x / scale) converted to e4m3 (stored as
// bytes). Scalar loads; the group is read twice from global memory.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

__device__ __forceinline__ float GroupReduceMax(float val, const int tid) {
  // the 16 lanes of a group are one half of a warp; xor offsets below 16 stay inside it
  const unsigned mask = (threadIdx.x % 32 >= 16) ? 0xffff0000u : 0x0000ffffu;
  val = fmaxf(val, __shfl_xor_sync(mask, val, 8));
  val = fmaxf(val, __shfl_xor_sync(mask, val, 4));
  val = fmaxf(val, __shfl_xor_sync(mask, val, 2));
  val = fmaxf(val, __shfl_xor_sync(mask, val, 1));
  return val;
}

/* kerntune:
args  = ["input: in bf16[tokens * hidden]", "output_q: out u8[tokens * hidden]", "output_s: out f32[tokens * hidden / 128]",
         "group_size: i32 = 128", "num_groups: i32 = tokens * hidden / 128",
         "groups_per_block: i32 = 16 if tokens * hidden / 128 % 16 == 0 else 8 if tokens * hidden / 128 % 8 == 0 else 4 if tokens * hidden / 128 % 4 == 0 else 2 if tokens * hidden / 128 % 2 == 0 else 1",
         "eps: f32 = 1e-10", "min_8bit: f32 = -448.0", "max_8bit: f32 = 448.0"]
sizes = [{ tokens = 8192, hidden = 7168 }, { tokens = 16, hidden = 7168 }, { tokens = 999, hidden = 5120 }]
grid  = "tokens * hidden / 128 / (16 if tokens * hidden / 128 % 16 == 0 else 8 if tokens * hidden / 128 % 8 == 0 else 4 if tokens * hidden / 128 % 4 == 0 else 2 if tokens * hidden / 128 % 2 == 0 else 1)"
block = "16 * (16 if tokens * hidden / 128 % 16 == 0 else 8 if tokens * hidden / 128 % 8 == 0 else 4 if tokens * hidden / 128 % 4 == 0 else 2 if tokens * hidden / 128 % 2 == 0 else 1)"
*/
template <typename T, typename DST_DTYPE>
__global__ void per_token_group_quant_8bit_kernel(const T* __restrict__ input, void* __restrict__ output_q,
                                                  float* __restrict__ output_s, const int group_size,
                                                  const int num_groups, const int groups_per_block, const float eps,
                                                  const float min_8bit, const float max_8bit) {
  const int threads_per_group = 16;
  const int64_t local_group_id = threadIdx.x / threads_per_group;
  const int lane_id = threadIdx.x % threads_per_group;

  const int64_t block_group_id = blockIdx.x * groups_per_block;
  const int64_t global_group_id = block_group_id + local_group_id;
  const int64_t block_group_offset = global_group_id * group_size;

  float local_absmax = eps;

  const T* group_input = input + block_group_offset;
  DST_DTYPE* group_output = static_cast<DST_DTYPE*>(output_q) + block_group_offset;

  for (int i = lane_id; i < group_size; i += threads_per_group) {
    const float abs_v = fabsf(static_cast<float>(group_input[i]));
    local_absmax = fmaxf(local_absmax, abs_v);
  }

  local_absmax = GroupReduceMax(local_absmax, lane_id);

  const float y_s = local_absmax / max_8bit;
  if (lane_id == 0) {
    output_s[global_group_id] = y_s;
  }

  for (int i = lane_id; i < group_size; i += threads_per_group) {
    const float q = fminf(fmaxf(static_cast<float>(group_input[i]) / y_s, min_8bit), max_8bit);
    group_output[i] = DST_DTYPE(q);
  }
}

void per_token_group_quant_fp8(const __nv_bfloat16* input, __nv_fp8_e4m3* output_q, float* output_s, int64_t numel,
                               int64_t group_size, double eps, double fp8_min, double fp8_max, cudaStream_t stream) {
  const int num_groups = numel / group_size;
  constexpr int THREADS_PER_GROUP = 16;

  int groups_per_block = 1;
  if (num_groups % 16 == 0) {
    groups_per_block = 16;
  } else if (num_groups % 8 == 0) {
    groups_per_block = 8;
  } else if (num_groups % 4 == 0) {
    groups_per_block = 4;
  } else if (num_groups % 2 == 0) {
    groups_per_block = 2;
  }

  const int num_blocks = num_groups / groups_per_block;
  const int num_threads = groups_per_block * THREADS_PER_GROUP;
  dim3 grid(num_blocks);
  dim3 block(num_threads);
  per_token_group_quant_8bit_kernel<__nv_bfloat16, __nv_fp8_e4m3><<<grid, block, 0, stream>>>(
      input, output_q, output_s, group_size, num_groups, groups_per_block, (float)eps, (float)fp8_min,
      (float)fp8_max);
}
