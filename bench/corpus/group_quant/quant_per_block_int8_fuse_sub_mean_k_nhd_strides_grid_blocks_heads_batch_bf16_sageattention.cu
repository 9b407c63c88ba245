// Per-block INT8 quantization of the keys as Tsinghua's SageAttention (thu-ml/SageAttention, csrc/fused/fused.cu:
// QuantInt8Kernel<head_dim, BLOCK_SIZE, num_pack_per_thread, has_sm_scale, sub_mean, T> behind
// quant_per_block_int8_fuse_sub_mean_cuda, the "smooth K" step of sageattn before the INT8 QK^T kernel), bf16 -> int8:
//   K [batch, num_tokens, num_heads, head_dim] (tensor_layout 0, "NHD"; every stride a uint32 argument, so HND works
//   too) minus the per-(batch, head) channel mean [batch, num_heads, head_dim], one scale per block of BLOCK_SIZE = 64
//   tokens of one head (a group of 64 x 128 values): scale [batch, num_heads, ceil(num_tokens / 64)] = amax / 127,
//   q = float_to_int8_rn(x * 127 / amax) by PTX cvt.rni.sat.s8.f32, amax seeded with 1e-7 against division by zero
//   grid (ceil(num_tokens / BLOCK_SIZE), num_heads, batch), block BLOCK_SIZE * head_dim / 8 / num_pack_per_thread
//   threads; each thread one 8-wide pack (a float4 of 8 bf16) of num_pack_per_thread tokens strided by BLOCK_SIZE /
//   num_pack_per_thread (here 1 pack, 1024 threads: 16 threads per token, 64 tokens); tokens past num_tokens read as
//   0 and not stored; vllm::blockReduceMax (xor-shuffle warps, static __shared__ float[32]), __shared__ s_amax; the
//   int8 results packed in two char4 and stored as one float2
//   launched on the default stream; the host dispatches block_size (64 / 128) and head_dim (64 / 128) into the template
// The sm_scale argument belongs to the query path (has_sm_scale) and is 0 here; spec = the K instance
// <128, 64, 1, false, true, __nv_bfloat16>. The torch::Tensor checks are replaced by raw pointers and sizes.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <type_traits>
#include <stdexcept>

namespace vllm {

template <typename T>
__inline__ __device__ T warpReduceMax(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1)
    val = max(val, __shfl_xor_sync(0xffffffff, val, mask, 32));
  return val;
}

template <typename T>
__inline__ __device__ T blockReduceMax(T val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  val = warpReduceMax<T>(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();

  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : (T)(-1e20f);
  val = warpReduceMax<T>(val);
  return val;
}

}  // namespace vllm

__device__ __forceinline__ int8_t float_to_int8_rn(float x) {
  uint32_t dst;
  asm volatile("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(dst) : "f"(x));
  return reinterpret_cast<const int8_t &>(dst);
}

template <typename T>
__device__ __forceinline__ float convert_to_float(T val) {
  static_assert(std::is_same<T, half>::value || std::is_same<T, nv_bfloat16>::value,
                "Only half and bfloat16 are supported");
  if constexpr (std::is_same<T, half>::value) {
    return __half2float(val);
  } else {
    return __bfloat162float(val);
  }
}

/* kerntune:
args  = ["input: in bf16[batch_size * num_tokens * num_heads * 128]", "mean: in bf16[batch_size * num_heads * 128]",
         "output: out i8[batch_size * num_tokens * num_heads * 128]",
         "scale: out f32[batch_size * num_heads * cdiv(num_tokens, 64)]", "sm_scale: f32 = 0.0",
         "num_tokens: u32 = num_tokens",
         "stride_bz_input: u32 = num_tokens * num_heads * 128", "stride_seq_input: u32 = num_heads * 128",
         "stride_h_input: u32 = 128", "stride_bz_mean: u32 = num_heads * 128", "stride_h_mean: u32 = 128",
         "stride_bz_output: u32 = num_tokens * num_heads * 128", "stride_seq_output: u32 = num_heads * 128",
         "stride_h_output: u32 = 128", "stride_bz_scale: u32 = num_heads * cdiv(num_tokens, 64)",
         "stride_h_scale: u32 = cdiv(num_tokens, 64)"]
sizes = [{ batch_size = 2, num_tokens = 16384, num_heads = 32 }, { batch_size = 4, num_tokens = 8, num_heads = 8 },
         { batch_size = 1, num_tokens = 1001, num_heads = 28 }]
grid  = ["cdiv(num_tokens, 64)", "num_heads", "batch_size"]
block = 1024
template_args = ["128", "64", "1", "false", "true", "__nv_bfloat16"]
*/
template <uint32_t head_dim, uint32_t BLOCK_SIZE, uint32_t num_pack_per_thread = 1, bool has_sm_scale = false,
          bool sub_mean = false, typename T>
__global__ void QuantInt8Kernel(T *__restrict__ input, T *__restrict__ mean, int8_t *__restrict__ output,
                                float *__restrict__ scale, float sm_scale, const uint32_t num_tokens,
                                const uint32_t stride_bz_input, const uint32_t stride_seq_input,
                                const uint32_t stride_h_input, const uint32_t stride_bz_mean,
                                const uint32_t stride_h_mean, const uint32_t stride_bz_output,
                                const uint32_t stride_seq_output, const uint32_t stride_h_output,
                                const uint32_t stride_bz_scale, const uint32_t stride_h_scale) {
  static_assert(num_pack_per_thread > 0, "The number of packs per thread must be greater than 0");

  constexpr uint32_t pack_size = 8;  // one float4 holds 8 half or 8 bfloat16
  constexpr uint32_t num_threads_per_token = head_dim / pack_size;
  static_assert(num_threads_per_token <= 32, "A token's threads must fit in one warp");

  T x_val[num_pack_per_thread][8];
  T mean_val[8];
  float x_val_float[num_pack_per_thread][8];
  float mean_val_float[8];

  uint32_t bx = blockIdx.x;
  uint32_t head_id = blockIdx.y;
  uint32_t batch_id = blockIdx.z;
  uint32_t thread_id = threadIdx.x;

  uint32_t thread_base_token = bx * BLOCK_SIZE + thread_id / num_threads_per_token;
  T *input_ptr_base = input + batch_id * stride_bz_input + head_id * stride_h_input +
                      thread_base_token * stride_seq_input + thread_id % num_threads_per_token * pack_size;
  T *mean_ptr_base = mean + batch_id * stride_bz_mean + head_id * stride_h_mean +
                     thread_id % num_threads_per_token * pack_size;
  int8_t *output_ptr_base = output + batch_id * stride_bz_output + head_id * stride_h_output +
                            thread_base_token * stride_seq_output + thread_id % num_threads_per_token * pack_size;
  float *scale_ptr_base = scale + batch_id * stride_bz_scale + head_id * stride_h_scale + bx;

  if constexpr (sub_mean) {
    *(float4 *)(&mean_val[0]) = *(float4 *)(mean_ptr_base);
#pragma unroll
    for (uint32_t j = 0; j < 8; j++) {
      mean_val_float[j] = convert_to_float(mean_val[j]);
    }
  }

  constexpr uint32_t iter_stride = BLOCK_SIZE / num_pack_per_thread;

  // load this thread's packs
  for (uint32_t i = 0; i < num_pack_per_thread; i++) {
    if (thread_base_token + i * iter_stride < num_tokens) {
      *(float4 *)(&x_val[i][0]) = *(float4 *)(input_ptr_base + i * iter_stride * stride_seq_input);
#pragma unroll
      for (uint32_t j = 0; j < 8; j++) {
        x_val_float[i][j] = convert_to_float(x_val[i][j]);
      }
      if constexpr (sub_mean) {
#pragma unroll
        for (uint32_t j = 0; j < 8; j++) {
          x_val_float[i][j] -= mean_val_float[j];
        }
      }
      if constexpr (has_sm_scale) {
#pragma unroll
        for (uint32_t j = 0; j < 8; j++) {
          x_val_float[i][j] *= sm_scale;
        }
      }
    } else {
#pragma unroll
      for (uint32_t j = 0; j < 8; j++) {
        x_val_float[i][j] = 0.0f;
      }
    }
  }

  float amax_val = 0.0000001f;  // no division by zero

#pragma unroll
  for (uint32_t i = 0; i < num_pack_per_thread; i++) {
#pragma unroll
    for (uint32_t j = 0; j < 8; j++) {
      amax_val = fmaxf(amax_val, fabsf(x_val_float[i][j]));
    }
  }

  __shared__ float s_amax;
  const float block_amax_val = vllm::blockReduceMax(amax_val);
  if (thread_id == 0) {
    s_amax = block_amax_val;
    scale_ptr_base[0] = s_amax / 127.0f;
  }
  __syncthreads();

  float tmp_scale = 127.0f / s_amax;

  char4 o_val[num_pack_per_thread][2];
#pragma unroll
  for (uint32_t i = 0; i < num_pack_per_thread; i++) {
#pragma unroll
    for (uint32_t j = 0; j < 2; j += 1) {
      o_val[i][j] = make_char4(float_to_int8_rn(x_val_float[i][j * 4 + 0] * tmp_scale),
                               float_to_int8_rn(x_val_float[i][j * 4 + 1] * tmp_scale),
                               float_to_int8_rn(x_val_float[i][j * 4 + 2] * tmp_scale),
                               float_to_int8_rn(x_val_float[i][j * 4 + 3] * tmp_scale));
    }
  }

  // int8 results, 8 bytes per pack
#pragma unroll
  for (uint32_t i = 0; i < num_pack_per_thread; i++) {
    if (thread_base_token + i * iter_stride < num_tokens) {
      *reinterpret_cast<float2 *>(output_ptr_base + i * iter_stride * stride_seq_output) =
          *reinterpret_cast<float2 *>(&o_val[i][0]);
    }
  }
}

#define DISPATCH_BLOCK_SIZE(block_size, BLOCK_SIZE, ...)                   \
  if (block_size == 64) {                                                  \
    constexpr int BLOCK_SIZE = 64;                                         \
    __VA_ARGS__                                                            \
  } else if (block_size == 128) {                                          \
    constexpr int BLOCK_SIZE = 128;                                        \
    __VA_ARGS__                                                            \
  } else {                                                                 \
    throw std::invalid_argument("Unsupported block_size");                 \
  }

#define DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, ...)                         \
  if (head_dim == 64) {                                                    \
    constexpr int HEAD_DIM = 64;                                           \
    __VA_ARGS__                                                            \
  } else if (head_dim == 128) {                                            \
    constexpr int HEAD_DIM = 128;                                          \
    __VA_ARGS__                                                            \
  } else {                                                                 \
    throw std::invalid_argument("Unsupported head_dim");                   \
  }

// input, output: [batch, num_tokens, num_heads, head_dim] (tensor_layout 0) or [batch, num_heads, num_tokens, head_dim]
// (tensor_layout 1), contiguous; mean: [batch, num_heads, head_dim]; scale: [batch, num_heads, ceil(num_tokens /
// block_size)] float.
void quant_per_block_int8_fuse_sub_mean_cuda(nv_bfloat16 *input, nv_bfloat16 *mean, int8_t *output, float *scale,
                                             int batch_size, int num_tokens, int num_heads, int head_dim,
                                             int block_size, int tensor_layout) {
  const int stride_bz_input = num_tokens * num_heads * head_dim;
  const int stride_bz_output = stride_bz_input;
  int stride_seq_input, stride_h_input, stride_seq_output, stride_h_output;
  if (tensor_layout == 0) {
    stride_seq_input = num_heads * head_dim;
    stride_h_input = head_dim;
  } else {
    stride_seq_input = head_dim;
    stride_h_input = num_tokens * head_dim;
  }
  stride_seq_output = stride_seq_input;
  stride_h_output = stride_h_input;
  const int stride_bz_mean = num_heads * head_dim, stride_h_mean = head_dim;

  DISPATCH_BLOCK_SIZE(block_size, BLOCK_SIZE, {
    DISPATCH_HEAD_DIM(head_dim, HEAD_DIM, {
      const int num_blocks = (num_tokens + BLOCK_SIZE - 1) / BLOCK_SIZE;
      const int stride_bz_scale = num_heads * num_blocks, stride_h_scale = num_blocks;

      dim3 grid(num_blocks, num_heads, batch_size);
      constexpr int num_pack_per_thread = (BLOCK_SIZE * (HEAD_DIM / 8) + 1023) / 1024;
      dim3 block(BLOCK_SIZE * (HEAD_DIM / 8) / num_pack_per_thread);

      QuantInt8Kernel<HEAD_DIM, BLOCK_SIZE, num_pack_per_thread, false, true, nv_bfloat16><<<grid, block>>>(
          input, mean, output, scale, 0.0f, num_tokens, stride_bz_input, stride_seq_input, stride_h_input,
          stride_bz_mean, stride_h_mean, stride_bz_output, stride_seq_output, stride_h_output, stride_bz_scale,
          stride_h_scale);
    });
  });
}
