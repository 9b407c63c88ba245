// RMSNorm fused with channel reordering and mixed-precision group quantization as the Atom low-bit serving system
// (efeslab/Atom, kernels/include/RMSNorm/RMSNorm.cuh: rmsnorm_fp16_i4_kernel<bdx, bdy, hidden_dim, group_size> behind
// run_rmsnorm_fp16_i4<group_size, hidden_dim>, the input norm of its W4A4 Llama layers; the same kernel ships in its
// punica-atom end-to-end build), fp16 -> int4 / int8:
//   y = half(x * weight * rsqrt(mean(x^2) + eps)) taken in REORDERED channel order (y[k] uses channel
//   reorder_index[k], an int16 gather from the row cached in dynamic shared memory, weight gathered the same way), then
//   quantized in groups of 128: the first 31 groups symmetric int4 (scale = absmax / 7, two values packed in a
//   PackInt4 bit-field byte, s4out [rows, (4096 - 128) / 2]) and the last group (the outlier channels) int8 (scale =
//   absmax / 127, s8out [rows, 128]); q = clamp(round(y / scale)) with r_scale = 1 / scale; scales as half written FOUR
//   times each at scale_index(row) + 2j in Atom's GEMM-operand layout (16-row tiles, rows 8..15 interleaved with rows
//   0..7), leading dimension SCALE_SIZE_A(rows) per group for s4scale
//   hidden_dim = 4096 and group_size = 128 fixed by static_asserts (Llama-7B); one row per block of (4, 32) threads:
//   threadIdx.y is the quantization group, each thread 32 consecutive channels (4 float4) of it; the row loaded once
//   by 128-bit loads into registers and into smem; sum of squares by an explicit smem tree (128 -> 64 -> 32) then a
//   cooperative_groups tile32 shfl_down, rsqrt broadcast through smem; group absmax by inline-PTX shfl.sync.bfly over
//   the 4 lanes of the group; results stored as int4 (16-byte) vectors; launched on the null stream
// Fixed here: the per-thread register array reinterpreted as float4 / int4 is declared __align__(16) (Atom's plain
// half[32] relies on the compiler's placement). The scale buffers are inout in the spec: the slots of the padded last
// 16-row tile that no row owns keep the caller's contents. reorder_index randint(0, 4096) (any in-range gather).
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define HOST_DEVICE __forceinline__ __host__ __device__
#define DEVICE __forceinline__ __device__
#define HOST __forceinline__ __host__

namespace cg = cooperative_groups;

struct PackInt4 {
  int8_t low : 4;
  int8_t high : 4;
};

HOST_DEVICE int clamp(int x, int a, int b) { return max(a, min(b, x)); }

template <typename T> HOST_DEVICE T abs(T x) { return x < (T)0 ? -x : x; }

template <typename T, typename U, typename Accum, int Size = sizeof(U) / sizeof(T)>
HOST_DEVICE Accum local_sum_p2(U *vec, Accum sumv) {
  T *view = reinterpret_cast<T *>(vec);
#pragma unroll 4
  for (int i = 0; i < Size; ++i) {
    sumv += (Accum)view[i] * (Accum)view[i];
  }
  return sumv;
}

/*
 * The first of a row's four scale slots; the other three follow at +2, +4, +6.
 */
HOST_DEVICE int scale_index(int row_id) {
  int bottomUpper = (row_id / 8) % 2;
  int group_idx = row_id % 8;
  int group_nums = row_id / 16;
  return (group_nums * 64) + (group_idx * 8) + bottomUpper;
}

/*
 * Leading dimension of the scales for x rows, in halves.
 */
#define SCALE_SIZE_A(x) ((x) / 16 * 64 + 64 - (1 - (x % 16) / 8) * (8 - (x % 8)) * 8)

#define mymax(a, b) ((a) > (b) ? (a) : (b))

template <typename T, typename U, typename Accum, int Size = sizeof(U) / sizeof(T)>
DEVICE Accum local_abs_max(U *vec, Accum maxv) {
  T *view = reinterpret_cast<T *>(vec);
#pragma unroll 4
  for (int i = 0; i < Size; ++i) {
    maxv = mymax((Accum)maxv, (Accum)abs((Accum)view[i]));
  }
  return maxv;
}

/* kerntune:
args  = ["input: in f16[seq_len * 4096]", "weight: in f16[4096]", "eps: f32 = 1e-5",
         "reorder_index: in i16[4096] ~ randint(0, 4096)", "s8out: out i8[seq_len * 128]",
         "s4out: out i8[seq_len * 1984]", "s8scale: inout f16[scale_ldm]", "s4scale: inout f16[31 * scale_ldm]",
         "scale_ldm: i32 = scale_ldm"]
sizes = [{ seq_len = 8192, scale_ldm = 32768 }, { seq_len = 4, scale_ldm = 32 }, { seq_len = 1001, scale_ldm = 4032 }]
grid  = "seq_len"
block = [4, 32]
smem  = 8704
template_args = ["4", "32", "4096", "128"]
*/
template <int bdx, int bdy, int hidden_dim, int group_size>
__global__ void rmsnorm_fp16_i4_kernel(
  half *input,
  half *weight,
  float eps,
  int16_t *reorder_index,
  int8_t *s8out,
  int8_t *s4out,
  half *s8scale,
  half *s4scale,
  int scale_ldm
){
  static_assert(bdx * bdy == 128, "128 threads per block");
  static_assert(hidden_dim == 4096, "hidden_dim is fixed");
  static_assert(group_size == 128, "group_size is fixed");

  constexpr int elements_per_thread = hidden_dim / (bdx * bdy);
  static_assert(bdx * elements_per_thread == group_size, "one threadIdx.y per group");

  // one row per block: move the pointers to it
  int row_id = blockIdx.x;
  input = input + row_id * hidden_dim;
  s8out = s8out + row_id * group_size;
  s4out = s4out + row_id * (hidden_dim - group_size) / 2;  // two int4 per byte

  cg::thread_block cta = cg::this_thread_block();

  extern __shared__ uint8_t raw_smem[];
  half *input_smem = reinterpret_cast<half *>(raw_smem);
  __align__(16) half input_frag[elements_per_thread];
  constexpr int input_smem_bytes = hidden_dim * sizeof(half);
  float *sum_smem = reinterpret_cast<float *>(raw_smem + input_smem_bytes);

  // 128-bit loads of this thread's channels, into registers and smem
  float4 *input_smem_float4 = reinterpret_cast<float4 *>(input_smem);
  float4 *input_frag_float4 = reinterpret_cast<float4 *>(input_frag);
  float4 *input_global_float4 = reinterpret_cast<float4 *>(input);
  constexpr int input_iterations = elements_per_thread * sizeof(half) / sizeof(float4);
  int tid = cta.thread_rank();
#pragma unroll
  for (int i = 0; i < input_iterations; ++i) {
    input_smem_float4[tid * input_iterations + i] =
      input_frag_float4[i] = input_global_float4[tid * input_iterations + i];
  }
  float sumv = 0.f;
#pragma unroll
  for (int i = 0; i < input_iterations; ++i) {
    sumv = local_sum_p2<half, float4, float>(input_frag_float4 + i, sumv);
  }
  sum_smem[tid] = sumv;
  cta.sync();
  // tree over the block in shared memory
  if (tid < 64) {
    sum_smem[tid] = sumv = sumv + sum_smem[tid + 64];
  }
  cta.sync();
  if (tid < 32) {
    sum_smem[tid] = sumv = sumv + sum_smem[tid + 32];
  }
  cta.sync();
  // then inside the first warp
  cg::thread_block_tile<32> tile32 = cg::tiled_partition<32>(cta);
  if (tid < 32) {
    for (int s = 16; s > 0; s >>= 1) {
      sumv += tile32.shfl_down(sumv, s);
    }
  }
  if (tid == 0) {
    sumv = rsqrt(sumv / hidden_dim + eps);
    sum_smem[0] = sumv;
  }
  cta.sync();
  sumv = sum_smem[0];

  // gather in reordered channel order and normalize
#pragma unroll 4
  for (int i = 0; i < elements_per_thread; ++i) {
    int reordered_idx = (int32_t)reorder_index[tid * elements_per_thread + i];
    half input_value = input_smem[reordered_idx];
    half weight_value = weight[reordered_idx];
    input_frag[i] = __float2half((float)input_value * (float)weight_value * (float)sumv);
  }

  // group absmax: the bdx lanes of a group are adjacent
  int group_id = threadIdx.y;
  float maxv = -1;
#pragma unroll 4
  for (int i = 0; i < input_iterations; ++i) {
    maxv = local_abs_max<half, float4, float>(input_frag_float4 + i, maxv);
  }
#pragma unroll
  for (int i = bdx / 2; i > 0; i >>= 1) {
    float tmp;
    asm volatile(
      "shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" :
      "=f"(tmp) : "f"(maxv), "r"(i)
    );
    maxv = mymax(maxv, tmp);
  }

  int replicated_row_id = scale_index(row_id);
  if (group_id == bdy - 1) {
    // last group: the outlier channels, int8
    maxv /= 127;
    if (threadIdx.x == 0) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s8scale[replicated_row_id + 2 * j] = (half)maxv;
      }
    }
  } else {
    // int4
    maxv /= 7;
    if (threadIdx.x == 0) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s4scale[group_id * scale_ldm + replicated_row_id + 2 * j] = (half)maxv;
      }
    }
  }

  // the registers are reused for the packed results
  int8_t *input_frag_int8 = reinterpret_cast<int8_t *>(input_frag);
  PackInt4 *input_frag_pack_int4 = reinterpret_cast<PackInt4 *>(input_frag);
  float r_scale = 1 / maxv;
  int lower_bound = (group_id == bdy - 1) ? -128 : -8;
  int upper_bound = (group_id == bdy - 1) ? 127 : 7;
  for (int j = 0; j < elements_per_thread; j += 2) {
    int8_t result0, result1;
    result0 = (int8_t)clamp(round((float)input_frag[j] * r_scale), lower_bound, upper_bound);
    result1 = (int8_t)clamp(round((float)input_frag[j + 1] * r_scale), lower_bound, upper_bound);
    if (group_id == bdy - 1) {
      input_frag_int8[j] = result0;
      input_frag_int8[j + 1] = result1;
    } else {
      input_frag_pack_int4[j / 2].low = result0;
      input_frag_pack_int4[j / 2].high = result1;
    }
  }
  // store
  if (group_id == bdy - 1) {
    constexpr int output_iterations = input_iterations / (sizeof(half) / sizeof(uint8_t));
    int4 *res = reinterpret_cast<int4 *>(input_frag);
    int4 *s8out_int4 = reinterpret_cast<int4 *>(s8out) + threadIdx.x * output_iterations;
#pragma unroll
    for (int j = 0; j < output_iterations; ++j) {
      s8out_int4[j] = res[j];
    }
  } else {
    static_assert(elements_per_thread / 2 == sizeof(int4), "one int4 of packed results per thread");
    constexpr int output_iterations = input_iterations / (sizeof(half) * 2 / sizeof(uint8_t));
    int4 *res = reinterpret_cast<int4 *>(input_frag);
    int4 *s4out_int4 = reinterpret_cast<int4 *>(s4out) + threadIdx.x * output_iterations;
#pragma unroll
    for (int j = 0; j < output_iterations; ++j) {
      s4out_int4[group_id * bdx + j] = res[j];
    }
  }
}

/*!
 * hidden_states [seq_len, 4096] fp16, weight [4096] fp16, reorder_index [4096] int16;
 * o_outliers [seq_len, 128] int8; o_norms [seq_len, (4096 - 128) / 2] packed int4;
 * outlier_scales [SCALE_SIZE_A(seq_len)] and norm_scales [31, SCALE_SIZE_A(seq_len)] half, scale_index() layout.
 */
template <int group_size, int hidden_dim>
void run_rmsnorm_fp16_i4(
  half *hidden_states,
  half *weight,
  float eps,
  int seq_len,
  int16_t *reorder_index,
  int8_t *o_outliers,
  int8_t *o_norms,
  half *outlier_scales,
  half *norm_scales
){
  static_assert(group_size == 128 && hidden_dim == 4096, "only 128 x 4096");
  constexpr int bdx = 4, bdy = 32;
  dim3 grids(seq_len);
  dim3 blocks(bdx, bdy);
  // the row, then one float per thread for the reduction
  size_t smem_size = hidden_dim * sizeof(half) + bdx * bdy * sizeof(float);

  rmsnorm_fp16_i4_kernel<bdx, bdy, hidden_dim, group_size><<<grids, blocks, smem_size, nullptr>>>(
    (half *)hidden_states,
    (half *)weight,
    eps,
    (int16_t *)reorder_index,
    (int8_t *)o_outliers,
    (int8_t *)o_norms,
    (half *)outlier_scales,
    (half *)norm_scales,
    SCALE_SIZE_A(seq_len)
  );
}

template void run_rmsnorm_fp16_i4<128, 4096>(half *, half *, float, int, int16_t *, int8_t *, int8_t *, half *,
                                             half *);
