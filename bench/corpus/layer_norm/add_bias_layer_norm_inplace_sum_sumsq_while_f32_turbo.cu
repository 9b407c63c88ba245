// LayerNorm with the bias and residual add fused in, as Tencent's TurboTransformers serving runtime writes it
// (turbo_transformers/layers/kernels/gpu_layer_norm_kernel.cu, layer_norm_kernel<AddBias> behind GPULayerNorm, the
// AddBiasLayerNorm of BERT / GPT-2 output layers), fp32, IN PLACE on `out`:
//   v = out + input + bias                    (AddBias = true; the residual addend arrives in `out`)
//   mean = sum(v) / n      var = sum(v^2) / n - mean^2        one pass, E[x^2] - E[x]^2, no clamp
//   out = (v - mean) * rsqrtf(var + 1e-6f) * gamma + beta     eps the literal 1e-6f inside the rsqrtf
// TurboTransformers' conventions: argument order (out, input, bias, gamma, beta, m, n) with int sizes, one row per
// block with `while (idx < n) { ...; idx += block_dim_x; }` loops over blockDim.x, the (sum, sum of squares) pair
// reduced together by blockReduce<ReduceType::kSum, 2> over a float[2] list (unrolled xor-shuffle warp steps per
// element, a static __shared__ float[2][32] of warp partials, warp 0 again), mean and 1 / std published by thread 0
// through __shared__ s_mean / s_variance, the second pass RE-READING out, input and bias to recompute v (no register
// or shared cache of the row), gamma and beta through __ldg. The launcher GPULayerNorm<AddBias, T> sends rows of at
// most 1024 that are a multiple of 32 to a one-element-per-thread variant (block = n) and every other row to this
// kernel with block = min(1024, round_up(n, 32)); this file's rows all take this kernel.
#include <cuda_runtime.h>
#include <algorithm>

namespace turbo_transformers {
namespace layers {
namespace kernels {

#define FINAL_MASK 0xffffffff

enum ReduceType { kMax = 0, kSum, kAvg };

template <ReduceType TypeVal, int NumElem>
__inline__ __device__ void warpReduce(float* val_list);

template <>
__inline__ __device__ void warpReduce<ReduceType::kSum, 1>(float* val_list) {
  *val_list += __shfl_xor_sync(FINAL_MASK, *val_list, 16, 32);
  *val_list += __shfl_xor_sync(FINAL_MASK, *val_list, 8, 32);
  *val_list += __shfl_xor_sync(FINAL_MASK, *val_list, 4, 32);
  *val_list += __shfl_xor_sync(FINAL_MASK, *val_list, 2, 32);
  *val_list += __shfl_xor_sync(FINAL_MASK, *val_list, 1, 32);
}

// two values summed at once, the steps unrolled by hand for instruction issue
template <>
__inline__ __device__ void warpReduce<ReduceType::kSum, 2>(float* val_list) {
  float val0_tmp, val1_tmp;
#define WarpReduceSumOneStep(a, b)                               \
  val0_tmp = __shfl_xor_sync(FINAL_MASK, *(val_list + 0), a, b); \
  val1_tmp = __shfl_xor_sync(FINAL_MASK, *(val_list + 1), a, b); \
  *(val_list + 0) += val0_tmp;                                   \
  *(val_list + 1) += val1_tmp

  WarpReduceSumOneStep(16, 32);
  WarpReduceSumOneStep(8, 32);
  WarpReduceSumOneStep(4, 32);
  WarpReduceSumOneStep(2, 32);
  WarpReduceSumOneStep(1, 32);
#undef WarpReduceSumOneStep
}

template <ReduceType TypeVal, int NumElem>
__inline__ __device__ void blockReduce(float* val_list) {
  const int n = NumElem;
  static __shared__ float shared[n][32];
  int lane_id = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  warpReduce<TypeVal, NumElem>(val_list);

  if (lane_id == 0) {
#pragma unroll
    for (int i = 0; i < n; ++i) {
      shared[i][wid] = *(val_list + i);
    }
  }
  __syncthreads();

  if (threadIdx.x < (blockDim.x >> 5)) {
#pragma unroll
    for (int i = 0; i < n; ++i) {
      *(val_list + i) = shared[i][lane_id];
    }
  } else {
#pragma unroll
    for (int i = 0; i < n; ++i) {
      *(val_list + i) = 0.f;
    }
  }
  warpReduce<TypeVal, NumElem>(val_list);
}

// rows of at most 1024 that are a multiple of 32: one element per thread, block = n
template <bool AddBias>
static __global__ void layer_norm_kernel_32x_le_1024(float* out, const float* input, const float* bias,
                                                     const float* gamma, const float* beta, int m, int n) {
  int tid = threadIdx.x;
  int offset = blockIdx.x * n + tid;
  __shared__ float s_mean;
  __shared__ float s_variance;

  float local_out = 0.0f;
  if (AddBias) {
    local_out = out[offset] + input[offset] + bias[tid];
  } else {
    local_out = out[offset];
  }

  float sum_list[2] = {local_out, local_out * local_out};
  blockReduce<ReduceType::kSum, 2>(sum_list);

  if (tid == 0) {
    float mean = sum_list[0] / n;
    float mean_2 = sum_list[1] / n;
    s_mean = mean;
    s_variance = rsqrtf(mean_2 - mean * mean + 1e-6f);
  }
  __syncthreads();
  out[offset] = (local_out - s_mean) * s_variance * gamma[tid] + beta[tid];
}

/* kerntune:
args  = ["out: inout f32[m * n]", "input: in f32[m * n]", "bias: in f32[n]", "gamma: in f32[n]", "beta: in f32[n]",
         "m: i32 = m", "n: i32 = n"]
sizes = [{ m = 4096, n = 4096 }, { m = 4, n = 5120 }, { m = 1001, n = 1003 }]
grid  = "m"
block = "min(1024, round_up(n, 32))"
template_args = ["true"]
*/
template <bool AddBias>
static __global__ void layer_norm_kernel(float* out, const float* input, const float* bias, const float* gamma,
                                         const float* beta, int m, int n) {
  int tid = threadIdx.x;
  int offset = blockIdx.x * n;
  int block_dim_x = blockDim.x;
  __shared__ float s_mean;
  __shared__ float s_variance;

  // local reduce
  int idx = tid;
  float local_sum_out = 0.;
  float local_sum_square_out = 0.;

  if (AddBias) {
    idx = tid;
    while (idx < n) {
      float tmp = (bias[idx] + input[idx + offset] + out[idx + offset]);
      local_sum_out += tmp;
      local_sum_square_out += tmp * tmp;
      idx += block_dim_x;
    }
  } else {
    idx = tid;
    while (idx < n) {
      float tmp = out[idx + offset];
      local_sum_out += tmp;
      local_sum_square_out += tmp * tmp;
      idx += block_dim_x;
    }
  }

  // remote reduce
  float sum_list[2] = {local_sum_out, local_sum_square_out};
  blockReduce<ReduceType::kSum, 2>(sum_list);

  if (tid == 0) {
    float mean = sum_list[0] / n;
    float mean_2 = sum_list[1] / n;
    s_mean = mean;
    s_variance = rsqrtf(mean_2 - mean * mean + 1e-6f);
  }
  __syncthreads();

  idx = tid;
  if (AddBias) {
    while (idx < n) {
      out[idx + offset] =
          (out[idx + offset] + input[idx + offset] + bias[idx] - s_mean) * s_variance * __ldg(&gamma[idx]) +
          __ldg(&beta[idx]);
      idx += block_dim_x;
    }
  } else {
    while (idx < n) {
      out[idx + offset] = (out[idx + offset] - s_mean) * s_variance * __ldg(&gamma[idx]) + __ldg(&beta[idx]);
      idx += block_dim_x;
    }
  }
}

// out [m, n] in place (it holds the residual addend on entry), input [m, n], bias / gamma / beta [n]; device
// pointers.
template <bool AddBias, typename T>
void GPULayerNorm(T* out, const T* input, const T* bias, const T* gamma, const T* beta, int m, int n,
                  cudaStream_t stream) {
  dim3 grid(m);
  if (n <= 1024 && n % 32 == 0) {
    dim3 block(n);
    layer_norm_kernel_32x_le_1024<AddBias><<<grid, block, 0, stream>>>(out, input, bias, gamma, beta, m, n);
  } else {
    int block_size = std::min(1024, (int)((n + 31) / 32 * 32));
    dim3 block(block_size);
    layer_norm_kernel<AddBias><<<grid, block, 0, stream>>>(out, input, bias, gamma, beta, m, n);
  }
}

template void GPULayerNorm<true>(float* out, const float* input, const float* bias, const float* gamma,
                                 const float* beta, int m, int n, cudaStream_t stream);
template void GPULayerNorm<false>(float* out, const float* input, const float* bias, const float* gamma,
                                  const float* beta, int m, int n, cudaStream_t stream);

}  // namespace kernels
}  // namespace layers
}  // namespace turbo_transformers
