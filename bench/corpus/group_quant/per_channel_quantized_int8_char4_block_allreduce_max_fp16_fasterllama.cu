// Per-token int8 quantization as caiwanxianhust's FasterLLaMA (a from-scratch int8 LLaMA inference framework,
// fasterLlama/cuda/decoder_kernels.cu: perChannelQuantizedKernel<DataType> behind perChannelQuantizedKernelLauncher,
// the activation side of its W8A8 GEMMs; "per channel" there means one scale per row of src [rows, cols]):
//   absmax over the row, scale = 127 / absmax (no floor: an all-zero row divides by zero), q = int8 by inline PTX
//   cvt.rni.sat.s8.f32 (float_to_int8_rn: round to nearest even, saturate), scale_ptr[row] = absmax / 127 written
//   by thread 0 after the quantization
//   one row per block of 128 threads; each thread takes 4 consecutive columns per step (i = threadIdx.x << 2, stride
//   blockDim.x << 2), read as four scalar __ldg of the fp16 source (twice: once for the max, once to quantize) and
//   stored as one char4; hidden_size a multiple of 4
//   blockAllReduceMax: warpAllReduce<MaxOp> by xor shuffles, static __shared__ float[32] of warp maxima, a second
//   warp pass, the total broadcast through a __shared__ result; an extra __syncthreads before it, as written
// FasterLLaMA's conventions: namespace FasterLLaMA (kernels) over namespace tinycudallama (cuda_kernels.cuh helpers),
// template <typename DataType> kernels with static_cast<float>, launcher instantiated for float and half.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace tinycudallama {

static inline __device__ int8_t float_to_int8_rn(float x) {
  uint32_t dst;
  asm volatile("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(dst) : "f"(x));
  return reinterpret_cast<const int8_t &>(dst);
}

template <typename T>
struct MaxOp {
  __device__ __forceinline__ T operator()(const T &a, const T &b) const { return max(a, b); }
};

template <template <typename> class ReductionOp, typename T>
__inline__ __device__ T warpAllReduce(T val) {
  auto func = ReductionOp<T>();
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) {
    val = func(val, __shfl_xor_sync(0xffffffff, val, mask, 32));
  }
  return val;
}

template <typename T>
__inline__ __device__ T blockAllReduceMax(T val) {
  static __shared__ T shared[32];
  __shared__ T result;
  int lane = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  val = warpAllReduce<MaxOp, T>(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();

  val = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane] : (T)0.0f;
  val = warpAllReduce<MaxOp, T>(val);
  if (threadIdx.x == 0) result = val;
  __syncthreads();
  return result;
}

}  // namespace tinycudallama

namespace FasterLLaMA {

using namespace tinycudallama;

/** per-row (per-token) quantization
 * src: [rows, cols]
 * dst: [rows, cols]
 * scale_ptr: [rows, ]
 */
/* kerntune:
args  = ["dst: out i8[nrows * hidden_size]", "src: in f16[nrows * hidden_size]", "scale_ptr: out f32[nrows]",
         "hidden_size: i32 = hidden_size"]
sizes = [{ nrows = 8192, hidden_size = 4096 }, { nrows = 4, hidden_size = 4096 },
         { nrows = 1001, hidden_size = 4100 }]
grid  = "nrows"
block = 128
template_args = ["half"]
*/
template <typename DataType>
__global__ void perChannelQuantizedKernel(int8_t *__restrict__ dst, const DataType *__restrict__ src,
                                          float *__restrict__ scale_ptr, const int hidden_size) {
  const int offset = blockIdx.x * hidden_size;
  float absmax = 0.0f;
  for (int i = (threadIdx.x << 2); i < hidden_size; i += (blockDim.x << 2)) {
    absmax = fmaxf(absmax, fabsf(static_cast<float>(__ldg(&src[offset + i]))));
    absmax = fmaxf(absmax, fabsf(static_cast<float>(__ldg(&src[offset + i + 1]))));
    absmax = fmaxf(absmax, fabsf(static_cast<float>(__ldg(&src[offset + i + 2]))));
    absmax = fmaxf(absmax, fabsf(static_cast<float>(__ldg(&src[offset + i + 3]))));
  }
  __syncthreads();
  absmax = blockAllReduceMax<float>(absmax);
  float scale = 127.0f / absmax;

  char4 *dst_ptr4 = (char4 *)(dst + offset);
  char4 tmp;
  for (int i = (threadIdx.x << 2); i < hidden_size; i += (blockDim.x << 2)) {
    tmp.x = float_to_int8_rn(static_cast<float>(__ldg(&src[offset + i])) * scale);
    tmp.y = float_to_int8_rn(static_cast<float>(__ldg(&src[offset + i + 1])) * scale);
    tmp.z = float_to_int8_rn(static_cast<float>(__ldg(&src[offset + i + 2])) * scale);
    tmp.w = float_to_int8_rn(static_cast<float>(__ldg(&src[offset + i + 3])) * scale);
    dst_ptr4[i >> 2] = tmp;
  }
  if (threadIdx.x == 0) {
    scale_ptr[blockIdx.x] = absmax / 127.0f;
  }
}

template <typename DataType>
void perChannelQuantizedKernelLauncher(int8_t *dst, const DataType *src, float *scale_ptr, const int hidden_size,
                                       const int nrows, cudaStream_t stream) {
  dim3 grid(nrows);
  dim3 block(128);
  perChannelQuantizedKernel<DataType><<<grid, block, 0, stream>>>(dst, src, scale_ptr, hidden_size);
}

template void perChannelQuantizedKernelLauncher<float>(int8_t *dst, const float *src, float *scale_ptr,
                                                       const int hidden_size, const int nrows, cudaStream_t stream);
template void perChannelQuantizedKernelLauncher<half>(int8_t *dst, const half *src, float *scale_ptr,
                                                      const int hidden_size, const int nrows, cudaStream_t stream);

}  // namespace FasterLLaMA
