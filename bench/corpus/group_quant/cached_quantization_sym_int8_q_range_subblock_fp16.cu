// Group-wise symmetric int8 quantization as DeepSpeed's quantization kernels do it (csrc/quantization/quantize.cu,
// cached_quantization with quantize::Params<Symmetric, 8>; used by ZeRO++ quantized communication and inference
// weight / activation quantization): an fp16 tensor cut into `groups` contiguous groups of elems_per_group,
//   max   = absmax of the group
//   scale = max == 0 ? 1 : (1 << q_bits) / (2 * max)        (= 128 / max: the q_range convention, so +max maps
//                                                             to 128 and is clamped to 127)
//   q     = clamp(__float2int_rn(float(x) * scale), -128, 127)   (round to nearest even)
//   params[group] = 1 / scale                                (the dequantization scale, fp32)
// DeepSpeed's sub-block schedule for groups of at most 128 elements: threads_per_group = next_pow2(ceil(
// elems_per_group / 8)) lanes per group, each lane holding one 16-byte load (8 halves, predicated: a lane past
// the group's end loads zeros), max_threads / threads_per_group = 256 / 16 groups per block on threadIdx.y, the
// group's max by an xor butterfly over its threads_per_group lanes, the 8 int8 codes stored as one 8-byte word.
// template <q_bits, UNROLL, internal_unroll, threads_per_group, max_threads> (UNROLL = internal_unroll = 1 here),
// the host dispatching on threads_per_group as DeepSpeed's LAUNCH_CACHED_QUANT does.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace quantize {
constexpr int granularity = 16;
constexpr int h_per_load = granularity / sizeof(__half);
}  // namespace quantize

/* kerntune:
args  = ["output_data: out i8[groups * elems_per_group]", "params: out f32[groups]",
         "input_data: in f16[groups * elems_per_group]", "groups: i32 = groups",
         "elems_per_group: i32 = elems_per_group"]
sizes = [{ groups = 262144, elems_per_group = 128 }, { groups = 128, elems_per_group = 128 },
         { groups = 1001, elems_per_group = 120 }]
grid  = "cdiv(groups, 16)"
block = [16, 16]
template_args = ["8", "1", "1", "16", "256"]
*/
template <int q_bits, int UNROLL, int internal_unroll, int threads_per_group, int max_threads>
__global__ void cached_quantization(int8_t* __restrict__ output_data, float* __restrict__ params,
                                    const __half* __restrict__ input_data, int groups, int elems_per_group) {
  static_assert(threads_per_group <= 32, "a group's lanes are one warp's");
  constexpr int groups_per_block = max_threads / threads_per_group;
  constexpr int32_t q_min = -(1 << (q_bits - 1));
  constexpr int32_t q_max = (1 << (q_bits - 1)) - 1;

  const int group_index = blockIdx.x * groups_per_block + threadIdx.y;
  const bool group_valid = group_index < groups;  // the last block's extra rows of threads do nothing

  const int64_t block_offset = static_cast<int64_t>(group_index) * elems_per_group;
  const int elem_offset = threadIdx.x * quantize::h_per_load;
  constexpr int stride = threads_per_group * quantize::h_per_load;

  alignas(16) __half2 local_buffer[UNROLL * internal_unroll * quantize::h_per_load / 2];

  float thread_max = 0.0f;
#pragma unroll
  for (int i = 0; i < UNROLL * internal_unroll; i++) {
    uint4* chunk = reinterpret_cast<uint4*>(local_buffer + i * quantize::h_per_load / 2);
    const int idx = elem_offset + i * stride;
    if (group_valid && idx < elems_per_group) {
      *chunk = *reinterpret_cast<const uint4*>(input_data + block_offset + idx);
    } else {
      *chunk = make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int j = 0; j < quantize::h_per_load / 2; j++) {
      const __half2 a = __habs2(local_buffer[i * quantize::h_per_load / 2 + j]);
      thread_max = fmaxf(thread_max, fmaxf(__low2float(a), __high2float(a)));
    }
  }

  // the group's max over its threads_per_group lanes
#pragma unroll
  for (int mask = threads_per_group / 2; mask > 0; mask >>= 1) {
    thread_max = fmaxf(thread_max, __shfl_xor_sync(0xffffffff, thread_max, mask));
  }

  const float scale = (thread_max == 0.0f) ? 1.0f : static_cast<float>(1 << q_bits) / (2 * thread_max);

#pragma unroll
  for (int i = 0; i < UNROLL * internal_unroll; i++) {
    const int idx = elem_offset + i * stride;
    if (group_valid && idx < elems_per_group) {
      alignas(8) int8_t q[quantize::h_per_load];
#pragma unroll
      for (int j = 0; j < quantize::h_per_load / 2; j++) {
        const float2 v = __half22float2(local_buffer[i * quantize::h_per_load / 2 + j]);
        int32_t lo = __float2int_rn(v.x * scale);
        int32_t hi = __float2int_rn(v.y * scale);
        lo = min(max(lo, q_min), q_max);
        hi = min(max(hi, q_min), q_max);
        q[2 * j] = static_cast<int8_t>(lo);
        q[2 * j + 1] = static_cast<int8_t>(hi);
      }
      *reinterpret_cast<uint2*>(output_data + block_offset + idx) = *reinterpret_cast<const uint2*>(q);
    }
  }

  if (group_valid && threadIdx.x == 0) {
    params[group_index] = 1 / scale;
  }
}

inline int next_pow2(const int val) {
  int rounded_val = val - 1;
  rounded_val |= rounded_val >> 1;
  rounded_val |= rounded_val >> 2;
  rounded_val |= rounded_val >> 4;
  rounded_val |= rounded_val >> 8;
  rounded_val |= rounded_val >> 16;
  return rounded_val + 1;
}

#define LAUNCH_CACHED_QUANT(q_bits, unroll_factor, internal_unroll_l, threads_per_group)             \
  cached_quantization<q_bits, unroll_factor, internal_unroll_l, threads_per_group, max_threads>    \
      <<<grid, block, 0, stream>>>(output_data, params, input_data, groups, elems_per_group);

// 8-bit symmetric, groups of at most 128 elements, elems_per_group a multiple of 8; device pointers, 16-byte
// aligned (the larger-group schedules, 4-bit packing and the asymmetric type are not part of this file).
void launch_quant(int8_t* output_data, float* params, const __half* input_data, const int groups,
                  const int elems_per_group, cudaStream_t stream) {
  constexpr int max_threads = 256;
  if (groups == 0 || elems_per_group > 128 || elems_per_group % quantize::h_per_load != 0) return;

  const int h_per_step = quantize::h_per_load;
  const int one_step_threads = next_pow2((elems_per_group + h_per_step - 1) / h_per_step);
  const int threads_per_group = (one_step_threads < max_threads) ? one_step_threads : max_threads;

  const int groups_per_block = (max_threads + threads_per_group - 1) / threads_per_group;
  const int groups_launch = (groups_per_block + groups - 1) / groups_per_block;

  dim3 block(threads_per_group, groups_per_block);
  dim3 grid(groups_launch);

  if (threads_per_group == 1) {
    LAUNCH_CACHED_QUANT(8, 1, 1, 1);
  } else if (threads_per_group == 2) {
    LAUNCH_CACHED_QUANT(8, 1, 1, 2);
  } else if (threads_per_group == 4) {
    LAUNCH_CACHED_QUANT(8, 1, 1, 4);
  } else if (threads_per_group == 8) {
    LAUNCH_CACHED_QUANT(8, 1, 1, 8);
  } else if (threads_per_group == 16) {
    LAUNCH_CACHED_QUANT(8, 1, 1, 16);
  }
}
