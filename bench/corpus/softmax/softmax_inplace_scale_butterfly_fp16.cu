// Attention-score softmax done in place, in the style of the FasterTransformer-era attention kernels that
// softmax the Q.K^T buffer where it lies: probs = softmax(x * scale) along the last dimension, the probabilities
// overwriting the fp16 scores. One row per block of a fixed 256 threads, fp32 math, three reads of the row (its
// max, the sum of exp, the normalized write). Each reduction is a __shfl_xor_sync butterfly inside every warp, the
// warps' values through a static __shared__ float[32] reduced again by warp 0, the block's result handed to all
// threads through a __shared__ scalar (s_max, s_sum). The max starts at -1e20f and the sum gets + 1e-6f, as that
// code does. In place is safe: every element is read and written by the same thread in the last pass, and the
// earlier passes have finished reading the row (the barriers of the reductions) before any write.
// Tolerance: probabilities are ~1/cols (1e-4 and far below), so the default f16 atol of 1e-2 would accept any
// output; atol is 1e-6 (above the fp16 subnormal step of 6e-8), rtol stays at the f16 default.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

#define FINAL_MASK 0xffffffff

__inline__ __device__ float warpReduceMax(float val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val = fmaxf(val, __shfl_xor_sync(FINAL_MASK, val, mask, 32));
  return val;
}

__inline__ __device__ float warpReduceSum(float val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  return val;
}

// The block's max; valid in warp 0 (thread 0 publishes it). blockDim.x is a multiple of 32, at most 1024.
__inline__ __device__ float blockReduceMax(float val) {
  static __shared__ float shared[32];
  const int lane = threadIdx.x & 0x1f;
  const int wid = threadIdx.x >> 5;
  val = warpReduceMax(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane] : -1e20f;
  val = warpReduceMax(val);
  return val;
}

// The block's sum; valid in warp 0 (thread 0 publishes it).
__inline__ __device__ float blockReduceSum(float val) {
  static __shared__ float shared[32];
  const int lane = threadIdx.x & 0x1f;
  const int wid = threadIdx.x >> 5;
  val = warpReduceSum(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane] : 0.0f;
  val = warpReduceSum(val);
  return val;
}

/* kerntune:
args  = ["x: inout f16[rows * cols]", "rows: i32 = rows", "cols: i32 = cols", "scale: f32 = 0.08838834764831845"]
sizes = [{ rows = 16384, cols = 2048 }, { rows = 32, cols = 4096 }, { rows = 1036, cols = 4099 }]
grid  = "rows"
block = 256
atol  = 1e-6
*/
template <typename T>
__global__ void softmax_inplace_scale_kernel(T* x, const int rows, const int cols, const float scale) {
  if (blockIdx.x >= rows) return;  // the whole block leaves together, before any barrier
  const int64_t row_offset = (int64_t)blockIdx.x * cols;

  __shared__ float s_max, s_sum;

  float local_max = -1e20f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float qk = (float)x[row_offset + i] * scale;
    local_max = fmaxf(local_max, qk);
  }
  const float max_val = blockReduceMax(local_max);
  if (threadIdx.x == 0) s_max = max_val;
  __syncthreads();

  float local_sum = 0.0f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    local_sum += __expf((float)x[row_offset + i] * scale - s_max);
  }
  const float sum_val = blockReduceSum(local_sum);
  if (threadIdx.x == 0) s_sum = sum_val + 1e-6f;
  __syncthreads();

  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float qk = __expf((float)x[row_offset + i] * scale - s_max);
    x[row_offset + i] = (T)(qk / s_sum);
  }
}

// x: [rows, cols] attention scores (rows = batch * heads * queries), overwritten by the probabilities.
template <typename T>
void invokeScaledSoftmaxInplace(T* x, const int rows, const int cols, const float scale, cudaStream_t stream) {
  dim3 grid(rows);
  dim3 block(256);
  softmax_inplace_scale_kernel<T><<<grid, block, 0, stream>>>(x, rows, cols, scale);
}

template void invokeScaledSoftmaxInplace<half>(half* x, const int rows, const int cols, const float scale,
                                               cudaStream_t stream);
