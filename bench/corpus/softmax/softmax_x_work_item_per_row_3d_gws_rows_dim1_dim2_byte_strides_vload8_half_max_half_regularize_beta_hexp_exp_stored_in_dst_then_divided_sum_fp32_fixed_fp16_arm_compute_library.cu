// Softmax along x in the style of the Arm Compute Library (ARM-software/ComputeLibrary,
// src/core/CL/cl_kernels/common/softmax_layer.cl: softmax_x, the 3-pass kernel ClSoftmaxKernel builds with
// -DSOFTMAX_X when the axis is 0, run by CLSoftmaxLayer / ClSoftmax; Arm's library of OpenCL and Neon kernels for
// Mali GPUs and Cortex CPUs, behind Arm NN and TensorFlow Lite's GPU paths), ported from OpenCL C to CUDA:
//   ONE WORK-ITEM PER ROW: the execution window is the tensor's with dimension 0 (the softmax axis, LENGTH values)
//   removed, so the global work size is (dim 1, dim 2, dim 3) = (rows, heads, batch) for a [B, H, Q, L] attention
//   tensor, each work-item walking its own row serially, three times, from byte addresses: src_ptr +
//   offset_first_element + dim_2 * stride_2 + dim_1 * stride_1 + dim_0 * stride_0 (strides in BYTES, the axis
//   removed from the stride list). DATA_TYPE = TMP_DATA_TYPE = half for F16 (non-quantized): (1) max in half over
//   VEC_SIZE = 16 / sizeof(half) = 8 wide vloads (no alignment needed) while i < LENGTH - VEC_SIZE, then scalars,
//   starting from -HALF_MAX; (2) x regularized as (x - max) * (half)BETA in half, exp in half (hexp), the
//   exponentials STORED TO dst (dst is the temporary for non-quantized types) and summed (SUM_REDUCE of each vector
//   as a pairwise tree, then into the running sum); (3) dst re-read and divided by the sum, rounded to half; the
//   IS_LOG build (log-softmax: regularized values stored, output x - log(sum)) instantiated too.
//   Template <DATA_TYPE, VEC_SIZE, IS_LOG> for the build options (spec <__half, 8, false>); a 3-D grid over the
//   window: (cdiv(rows, 128), dim 2, dim 3) with 128 threads in x (the CL runtime picks the local size when the
//   kernel is enqueued with a null range; 128 here).
// Fixed: (1) the running sum is TMP_DATA_TYPE = half for F16, which stagnates once it passes 2048 (half's spacing is
// 2 there): a row of 4096 equal logits sums to 2048 instead of 4096 and every probability comes out twice too large;
// the sum is accumulated in fp32 here (the division by it too, rounded once to half); (2) the byte strides and
// offsets are cl_uint, so dim_2 * stride_2 wraps past 4 GiB: 64-bit here.
// Changed: LENGTH and BETA, baked into the program by the CL build options, are kernel arguments; the size of global
// dimension 0 is passed for a bound check (a CL global size is exact, a CUDA grid is rounded up to whole blocks);
// CLSoftmaxLayer's configure / run became a C++ launcher with device pointers, the 4-D shape (x first, as ACL's
// TensorShape), beta, is_log and a stream (half and float instantiated).
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace arm_compute_cl {

constexpr int kLocalSize = 128;

// OpenCL built-ins per DATA_TYPE
__device__ __forceinline__ __half min_value(__half) { return __ushort_as_half((unsigned short)0xFBFFu); }  // -HALF_MAX
__device__ __forceinline__ float min_value(float) { return -3.402823466e+38f; }                            // -FLT_MAX
__device__ __forceinline__ __half max_(__half a, __half b) { return __hmax(a, b); }
__device__ __forceinline__ float max_(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ __half regularize(__half x, __half max_value, __half beta) {
  return __hmul(__hsub(x, max_value), beta);
}
__device__ __forceinline__ float regularize(float x, float max_value, float beta) { return (x - max_value) * beta; }
__device__ __forceinline__ __half exp_(__half x) { return hexp(x); }
__device__ __forceinline__ float exp_(float x) { return expf(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ void from_f32(__half* p, float v) { *p = __float2half(v); }
__device__ __forceinline__ void from_f32(float* p, float v) { *p = v; }
template <typename T> __device__ __forceinline__ T convert(float v);
template <> __device__ __forceinline__ __half convert<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ float convert<float>(float v) { return v; }

// SUM_REDUCE(x, N): pairwise over the vector's halves, s0 + s1 at the leaves (in fp32 here, see Fixed)
template <int N>
__device__ __forceinline__ float sum_reduce(const float* v) {
  if constexpr (N == 1) {
    return v[0];
  } else {
    return sum_reduce<N / 2>(v) + sum_reduce<N / 2>(v + N / 2);
  }
}

// Softmax probabilities are ~1 / LENGTH (5e-4 and below), far below the default absolute tolerance: atol 1e-5.
/* kerntune:
args  = ["src_ptr: in f16[B * H * Q * L]", "src_stride_0: u64 = L * 2", "src_stride_1: u64 = Q * L * 2",
         "src_stride_2: u64 = H * Q * L * 2", "src_offset_first_element: u64 = 0",
         "dst_ptr: out f16[B * H * Q * L]", "dst_stride_0: u64 = L * 2", "dst_stride_1: u64 = Q * L * 2",
         "dst_stride_2: u64 = H * Q * L * 2", "dst_offset_first_element: u64 = 0", "LENGTH: i32 = L",
         "BETA: f32 = 1.0", "gws_0: u32 = Q"]
sizes = [{ B = 1, H = 16, Q = 2048, L = 2048 }, { B = 4, H = 32, Q = 1, L = 4097 },
         { B = 3, H = 7, Q = 77, L = 1001 }]
grid  = ["cdiv(Q, 128)", "H", "B"]
block = 128
atol  = 1e-5
template_args = ["__half", "8", "false"]
*/
template <typename DATA_TYPE, int VEC_SIZE, bool IS_LOG>
__global__ void __launch_bounds__(kLocalSize)
    softmax_x(const DATA_TYPE* src_ptr, uint64_t src_stride_0, uint64_t src_stride_1, uint64_t src_stride_2,
              uint64_t src_offset_first_element, DATA_TYPE* dst_ptr, uint64_t dst_stride_0, uint64_t dst_stride_1,
              uint64_t dst_stride_2, uint64_t dst_offset_first_element, int LENGTH, float BETA, uint32_t gws_0) {
  typedef DATA_TYPE TMP_DATA_TYPE;  // not quantized

  const uint32_t dim_0 = blockIdx.x * blockDim.x + threadIdx.x;  // get_global_id(0)
  const uint32_t dim_1 = blockIdx.y;                             // get_global_id(1)
  const uint32_t dim_2 = blockIdx.z;                             // get_global_id(2)
  if (dim_0 >= gws_0) return;

  // fixed: 64-bit byte offsets
  const char* src_row = reinterpret_cast<const char*>(src_ptr) + src_offset_first_element + dim_2 * src_stride_2 +
                        dim_1 * src_stride_1 + dim_0 * src_stride_0;
  char* dst_row = reinterpret_cast<char*>(dst_ptr) + dst_offset_first_element + dim_2 * dst_stride_2 +
                  dim_1 * dst_stride_1 + dim_0 * dst_stride_0;
  const DATA_TYPE* src = reinterpret_cast<const DATA_TYPE*>(src_row);
  DATA_TYPE* dst = reinterpret_cast<DATA_TYPE*>(dst_row);
  TMP_DATA_TYPE* tmp = reinterpret_cast<TMP_DATA_TYPE*>(dst_row);  // tmp_ptr = dst_ptr

  // Calculate max value.
  DATA_TYPE max_value = min_value(DATA_TYPE());
  int i = 0;

  for (i = 0; i < LENGTH - VEC_SIZE; i += VEC_SIZE) {
    DATA_TYPE data[VEC_SIZE];  // VLOAD(VEC_SIZE)
#pragma unroll
    for (int k = 0; k < VEC_SIZE; ++k) data[k] = src[i + k];
    DATA_TYPE m = data[0];  // MAX_REDUCE(data, VEC_SIZE)
#pragma unroll
    for (int k = 1; k < VEC_SIZE; ++k) m = max_(m, data[k]);
    max_value = max_(max_value, m);
  }

  for (; i < LENGTH; ++i) {
    max_value = max_(max_value, src[i]);
  }

  // Regularize the data.
  float sum_value = 0.0f;  // fixed: TMP_DATA_TYPE (half) in the original
  const TMP_DATA_TYPE beta = convert<TMP_DATA_TYPE>(BETA);

  for (i = 0; i < LENGTH - VEC_SIZE; i += VEC_SIZE) {
    TMP_DATA_TYPE data[VEC_SIZE];
    float e[VEC_SIZE];
#pragma unroll
    for (int k = 0; k < VEC_SIZE; ++k) {
      data[k] = regularize(src[i + k], max_value, beta);
      if (IS_LOG) {
        e[k] = to_f32(exp_(data[k]));
      } else {
        data[k] = exp_(data[k]);
        e[k] = to_f32(data[k]);
      }
    }
    sum_value += sum_reduce<VEC_SIZE>(e);
#pragma unroll
    for (int k = 0; k < VEC_SIZE; ++k) tmp[i + k] = data[k];  // VSTORE(VEC_SIZE)
  }

  for (; i < LENGTH; ++i) {
    TMP_DATA_TYPE data = regularize(src[i], max_value, beta);
    if (IS_LOG) {
      sum_value += to_f32(exp_(data));
    } else {
      data = exp_(data);
      sum_value += to_f32(data);
    }
    tmp[i] = data;
  }

  // Normalize the data.
  const float log_sum = IS_LOG ? logf(sum_value) : 0.0f;

  for (i = 0; i < LENGTH - VEC_SIZE; i += VEC_SIZE) {
    TMP_DATA_TYPE data[VEC_SIZE];
#pragma unroll
    for (int k = 0; k < VEC_SIZE; ++k) data[k] = tmp[i + k];
#pragma unroll
    for (int k = 0; k < VEC_SIZE; ++k) {
      const float r = IS_LOG ? to_f32(data[k]) - log_sum : to_f32(data[k]) / sum_value;  // NORMALIZE
      from_f32(&dst[i + k], r);
    }
  }

  for (; i < LENGTH; ++i) {
    const TMP_DATA_TYPE data = tmp[i];
    const float r = IS_LOG ? to_f32(data) - log_sum : to_f32(data) / sum_value;
    from_f32(&dst[i], r);
  }
}

// adjust_vec_size(16 / element_size, dim 0): the widest vector not wider than the row
static int adjust_vec_size(int vec_size, uint32_t dim0) {
  while (vec_size > 1 && (uint32_t)vec_size > dim0) vec_size /= 2;
  return vec_size;
}

template <typename T, int VEC_SIZE>
static void launch_vec(const T* src, T* dst, const uint64_t shape[4], float beta, bool is_log, cudaStream_t stream) {
  const uint64_t es = sizeof(T);
  // strides_in_bytes() with dimension 0 (the axis) removed: rows, then dims 2 and 3
  const uint64_t stride_0 = shape[0] * es, stride_1 = shape[0] * shape[1] * es,
                 stride_2 = shape[0] * shape[1] * shape[2] * es;
  const uint32_t gws_0 = (uint32_t)shape[1];
  const dim3 grid((gws_0 + kLocalSize - 1) / kLocalSize, (unsigned)shape[2], (unsigned)shape[3]);
  if (is_log) {
    softmax_x<T, VEC_SIZE, true><<<grid, kLocalSize, 0, stream>>>(src, stride_0, stride_1, stride_2, 0, dst, stride_0,
                                                                  stride_1, stride_2, 0, (int)shape[0], beta, gws_0);
  } else {
    softmax_x<T, VEC_SIZE, false><<<grid, kLocalSize, 0, stream>>>(src, stride_0, stride_1, stride_2, 0, dst, stride_0,
                                                                   stride_1, stride_2, 0, (int)shape[0], beta, gws_0);
  }
}

}  // namespace arm_compute_cl

// src, dst: device tensors of ACL shape (d0, d1, d2, d3), d0 the softmax axis (x) and contiguous: a [B, H, Q, L]
// tensor is (L, Q, H, B). beta: the exponent scale; is_log: log-softmax.
template <typename T>
void cl_softmax_layer(const T* src, T* dst, uint32_t d0, uint32_t d1, uint32_t d2, uint32_t d3, float beta,
                      bool is_log, cudaStream_t stream) {
  if (d0 == 0 || d1 == 0 || d2 == 0 || d3 == 0) return;
  assert(d2 <= 65535 && d3 <= 65535 && "window dims 1 and 2 go to grid y and z");
  const uint64_t shape[4] = {d0, d1, d2, d3};
  switch (arm_compute_cl::adjust_vec_size(16 / (int)sizeof(T), d0)) {
    case 8:
      arm_compute_cl::launch_vec<T, 8>(src, dst, shape, beta, is_log, stream);
      break;
    case 4:
      arm_compute_cl::launch_vec<T, 4>(src, dst, shape, beta, is_log, stream);
      break;
    case 2:
      arm_compute_cl::launch_vec<T, 2>(src, dst, shape, beta, is_log, stream);
      break;
    default:
      arm_compute_cl::launch_vec<T, 1>(src, dst, shape, beta, is_log, stream);
      break;
  }
}

template void cl_softmax_layer<__half>(const __half*, __half*, uint32_t, uint32_t, uint32_t, uint32_t, float, bool,
                                       cudaStream_t);
template void cl_softmax_layer<float>(const float*, float*, uint32_t, uint32_t, uint32_t, uint32_t, float, bool,
                                      cudaStream_t);
