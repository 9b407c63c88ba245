// Residual add + RMSNorm as Alibaba's DashInfer (modelscope/dash-infer, the AllSpark engine; csrc/core/kernel/cuda/
// layernorm.cu, allspark::cuda::layernorm_nobeta_kernel<ADDBIAS, ite, T> behind LayerNormNoBetaKernelLauncher<T>,
// the "no beta" LayerNorm that AllSpark uses as RMSNorm): with ADDBIAS the `bias` operand is a FULL [m, n] tensor
// indexed like the input (the residual branch), added element-wise BEFORE the norm; the sum is not written back.
//   x = float(__ldg(input) + __ldg(bias))      (the add done in T: half + half rounds to half, then widened)
//   out = T(x * rsqrtf(mean(x^2) + eps) * float(gamma))
// One row per block; each thread keeps `ite` elements in a float local_out[ite] register array (columns
// i * blockDim.x + tid, zero past n) and reads the input once; the sum of squares goes through AllSpark's
// blockReduce<float, ReduceOp::kSUM>(&val) (in-place pointer; __shfl_down_sync warp steps 16..1, a static
// __shared__ T shared[32], the warp sums re-reduced by every warp, result valid in thread 0); thread 0 divides by n
// and publishes rsqrtf(mean_2 + eps) through __shared__ s_variance. __ldg on every global read. The launcher picks
// ite from n (8 / 16 / 32 / 64) with 1024 threads for ite 8 and 16. Argument order (out, input, bias, gamma, n,
// eps), grid m. fp16 here (instantiated for float and half; AllSpark's hie::bfloat16 instantiation is left out).
// Fixed from DashInfer: its launcher chose ite and the thread count with truncating n / ite (`n / 8 <= 1024`,
// `(n / ite + 31) / 32 * 32`), so for some widths (n = 8193..8199 in the ite 8 branch, n = 16400 in the ite 32
// one) threads * ite < n and the last columns were never read nor written; the launcher rounds n / ite up here.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cfloat>

enum class ReduceOp : int {
  kSUM = 0,
  kPROD = 1,
  kMAX = 2,
  kMIN = 3,
};

template <typename T, ReduceOp op>
__inline__ __device__ T computeFillValue() {
  T result = 0.0f;
  switch (op) {
    case ReduceOp::kPROD:
      result = 1.0f;
      break;
    case ReduceOp::kMAX:
      result = -FLT_MAX;
      break;
    case ReduceOp::kMIN:
      result = FLT_MAX;
      break;
    default:
      break;
  }
  return static_cast<T>(result);
}

template <typename T, ReduceOp op>
__inline__ __device__ void reduceFunction(T* val, T acc) {
  switch (op) {
    case ReduceOp::kSUM:
      *val += acc;
      break;
    case ReduceOp::kPROD:
      *val *= acc;
      break;
    case ReduceOp::kMAX:
      *val = *val > acc ? *val : acc;
      break;
    case ReduceOp::kMIN:
      *val = *val < acc ? *val : acc;
      break;
  }
}

#define FINAL_MASK 0xffffffff
template <typename T, ReduceOp op>
__inline__ __device__ void warpReduce(T* val) {
  reduceFunction<T, op>(val, __shfl_down_sync(FINAL_MASK, *val, 16, 32));
  reduceFunction<T, op>(val, __shfl_down_sync(FINAL_MASK, *val, 8, 32));
  reduceFunction<T, op>(val, __shfl_down_sync(FINAL_MASK, *val, 4, 32));
  reduceFunction<T, op>(val, __shfl_down_sync(FINAL_MASK, *val, 2, 32));
  reduceFunction<T, op>(val, __shfl_down_sync(FINAL_MASK, *val, 1, 32));
}

// Block-wide reduction of *val; the result is valid in thread 0.
template <typename T, ReduceOp op>
__forceinline__ __device__ void blockReduce(T* val) {
  static __shared__ T shared[32];
  int lane_id = threadIdx.x & 0x1f;
  int warp_id = threadIdx.x >> 5;
  warpReduce<T, op>(val);
  if (lane_id == 0) shared[warp_id] = *val;
  __syncthreads();
  *val = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane_id]
                                           : computeFillValue<T, op>();
  warpReduce<T, op>(val);
}
#undef FINAL_MASK

namespace allspark {
namespace cuda {

/* kerntune:
args  = ["out: out f16[m * n]", "input: in f16[m * n]", "bias: in f16[m * n]", "gamma: in f16[n]",
         "n: i32 = n", "eps: f32 = 1e-6"]
sizes = [{ m = 16384, n = 4096 }, { m = 4, n = 8192 }, { m = 1001, n = 5123 }]
grid  = "m"
block = 1024
template_args = ["true", "8", "half"]
*/
template <bool ADDBIAS, int ite, typename T>
__global__ static void layernorm_nobeta_kernel(T* out, const T* input,
                                               const T* bias, const T* gamma,
                                               int n, float eps) {
  int tid = threadIdx.x;
  __shared__ float s_variance;

  float local_out[ite];
  float mean_2 = 0.f;
#pragma unroll ite
  for (int i = 0; i < ite; ++i) {
    int idx = blockIdx.x * n + i * blockDim.x + tid;
    if (i * blockDim.x + tid >= n) {
      local_out[i] = 0;
    } else {
      if (ADDBIAS) {
        local_out[i] = (float)(__ldg(&input[idx]) + __ldg(&bias[idx]));
      } else {
        local_out[i] = (float)(__ldg(&input[idx]));
      }
    }

    mean_2 += local_out[i] * local_out[i];
  }
  __syncthreads();
  blockReduce<float, ReduceOp::kSUM>(&mean_2);
  if (tid == 0) {
    mean_2 /= n;
    s_variance = rsqrtf(mean_2 + (float)eps);
  }
  __syncthreads();
#pragma unroll ite
  for (int i = 0; i < ite; ++i) {
    int col_id = i * blockDim.x + tid;
    if (col_id >= n) {
      continue;
    }
    int idx = blockIdx.x * n + col_id;
    out[idx] =
        (float)(local_out[i]) * s_variance * (float)(__ldg(&gamma[col_id]));
  }
}

// out, input, bias: device pointers to [m, n] rows (bias may be nullptr: plain RMSNorm); gamma: [n].
template <typename T>
void LayerNormNoBetaKernelLauncher(T* out, const T* input, const T* bias,
                                   const T* gamma, int m, int n, float eps,
                                   cudaStream_t stream) {
  if ((n + 7) / 8 <= 1024) {
    const int ite = 8;
    const int thread_num = 1024;
    if (bias != nullptr) {
      layernorm_nobeta_kernel<true, ite, T>
          <<<m, thread_num, 0, stream>>>(out, input, bias, gamma, n, eps);
    } else {
      layernorm_nobeta_kernel<false, ite, T>
          <<<m, thread_num, 0, stream>>>(out, input, bias, gamma, n, eps);
    }
  } else if ((n + 15) / 16 <= 1024) {
    const int ite = 16;
    const int thread_num = 1024;
    if (bias != nullptr) {
      layernorm_nobeta_kernel<true, ite, T>
          <<<m, thread_num, 0, stream>>>(out, input, bias, gamma, n, eps);
    } else {
      layernorm_nobeta_kernel<false, ite, T>
          <<<m, thread_num, 0, stream>>>(out, input, bias, gamma, n, eps);
    }
  } else if ((n + 31) / 32 <= 1024) {
    const int ite = 32;
    const int thread_num = ((n + ite - 1) / ite + 32 - 1) / 32 * 32;
    if (bias != nullptr) {
      layernorm_nobeta_kernel<true, ite, T>
          <<<m, thread_num, 0, stream>>>(out, input, bias, gamma, n, eps);
    } else {
      layernorm_nobeta_kernel<false, ite, T>
          <<<m, thread_num, 0, stream>>>(out, input, bias, gamma, n, eps);
    }
  } else if ((n + 63) / 64 <= 1024) {
    const int ite = 64;
    const int thread_num = ((n + ite - 1) / ite + 32 - 1) / 32 * 32;
    if (bias != nullptr) {
      layernorm_nobeta_kernel<true, ite, T>
          <<<m, thread_num, 0, stream>>>(out, input, bias, gamma, n, eps);
    } else {
      layernorm_nobeta_kernel<false, ite, T>
          <<<m, thread_num, 0, stream>>>(out, input, bias, gamma, n, eps);
    }
  }
}
template void LayerNormNoBetaKernelLauncher<float>(
    float* out, const float* input, const float* bias, const float* gamma,
    int m, int n, float eps, cudaStream_t stream);
template void LayerNormNoBetaKernelLauncher<half>(half* out, const half* input,
                                                  const half* bias,
                                                  const half* gamma, int m,
                                                  int n, float eps,
                                                  cudaStream_t stream);

}  // namespace cuda
}  // namespace allspark
