// Per-token-group int8 quantization (fp16 input [num_tokens, hidden], groups of group_size along hidden, one fp32
// scale per group stored row-major [num_tokens, hidden / group_size]) written as one token per block and one warp
// per group: blockDim = hidden / group_size * 32 (at most 1024 threads, so hidden <= 32 * group_size), warp w of
// block t owns group w of token t. Each lane keeps group_size / 32 elements in registers (element lane + 32 * j, so a
// warp's loads are coalesced), the absolute maximum is reduced with __shfl_down_sync into lane 0 and broadcast back
// with __shfl_sync(..., 0); scale = max(absmax, 1e-10) / 127, q = __float2int_rn(x / scale) clamped to [-128, 127].
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cassert>
#include <cstdint>

#define WARP_SIZE 32
#define MAX_ELEMS_PER_LANE 8  // group_size up to 256

/* kerntune:
args  = ["input: in f16[tokens * hidden]", "output_q: out i8[tokens * hidden]",
         "output_s: out f32[tokens * hidden / 128]", "hidden: i32 = hidden", "group_size: i32 = 128"]
sizes = [{ tokens = 8192, hidden = 3584 }, { tokens = 8, hidden = 4096 }, { tokens = 1001, hidden = 3200 }]
grid  = "tokens"
block = "hidden / 128 * 32"
*/
__global__ void per_token_group_quant_int8_kernel(const __half* __restrict__ input, int8_t* __restrict__ output_q,
                                                  float* __restrict__ output_s, const int hidden,
                                                  const int group_size) {
  const int token = blockIdx.x;
  const int group = threadIdx.x / WARP_SIZE;  // blockDim.x == hidden / group_size * WARP_SIZE
  const int lane = threadIdx.x % WARP_SIZE;
  const int groups_per_row = hidden / group_size;
  const int elems_per_lane = group_size / WARP_SIZE;

  const int64_t group_offset = (int64_t)token * hidden + (int64_t)group * group_size;
  const __half* group_in = input + group_offset;
  int8_t* group_out = output_q + group_offset;

  float vals[MAX_ELEMS_PER_LANE];
  float absmax = 0.0f;
#pragma unroll
  for (int j = 0; j < MAX_ELEMS_PER_LANE; ++j) {
    if (j < elems_per_lane) {
      vals[j] = __half2float(group_in[lane + j * WARP_SIZE]);
      absmax = fmaxf(absmax, fabsf(vals[j]));
    }
  }

  // reduce to lane 0, then hand lane 0's value to the whole warp
#pragma unroll
  for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
    absmax = fmaxf(absmax, __shfl_down_sync(0xffffffff, absmax, offset));
  }
  absmax = __shfl_sync(0xffffffff, absmax, 0);

  const float scale = fmaxf(absmax, 1e-10f) / 127.0f;
#pragma unroll
  for (int j = 0; j < MAX_ELEMS_PER_LANE; ++j) {
    if (j < elems_per_lane) {
      int q = __float2int_rn(vals[j] / scale);
      q = min(max(q, -128), 127);
      group_out[lane + j * WARP_SIZE] = static_cast<int8_t>(q);
    }
  }

  if (lane == 0) {
    output_s[(int64_t)token * groups_per_row + group] = scale;
  }
}

// input: [num_tokens, hidden] fp16; output_q: [num_tokens, hidden] int8; output_s: [num_tokens, hidden / group_size]
void per_token_group_quant_int8(const __half* input, int8_t* output_q, float* output_s, int num_tokens, int hidden,
                                int group_size, cudaStream_t stream) {
  assert(group_size % WARP_SIZE == 0 && group_size <= WARP_SIZE * MAX_ELEMS_PER_LANE);
  assert(hidden % group_size == 0);
  const int groups_per_row = hidden / group_size;
  assert(groups_per_row * WARP_SIZE <= 1024);
  dim3 grid(num_tokens);
  dim3 block(groups_per_row * WARP_SIZE);
  per_token_group_quant_int8_kernel<<<grid, block, 0, stream>>>(input, output_q, output_s, hidden, group_size);
}
