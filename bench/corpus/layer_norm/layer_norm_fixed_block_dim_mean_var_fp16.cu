// LayerNorm forward as PaddlePaddle's layer_norm_kernel.cu.h writes its generic path: x [batch_size,
// feature_size] in the storage type T (fp16 here), scale and bias in the compute type U (fp32), and the statistics
// written per row as mean and VARIANCE (not rstd), both U. One block per row with a compile-time BlockDim: the
// host maps the feature size to a power of two (at most 512) and dispatches through a FIXED_BLOCK_DIM_CASE switch
// macro, the kernel launch written inside the macro's argument. One pass sums x and x * x into a
// PairForLayerNorm<U> struct reduced by cub::BlockReduce with an add functor; var = E[x^2] - mean^2 by thread 0,
// published through __shared__; then y = T(scale[j] * (x - mean) * rsqrt(var + eps) + bias[j]) over 64-bit
// indices striding by BlockDim. One rounding, at the store.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/cub.cuh>
#include <cmath>
#include <cstdint>

#define FIXED_BLOCK_DIM_CASE_BASE(log2_block_dim, ...) \
  case (1 << (log2_block_dim)): {                      \
    constexpr auto kBlockDim = (1 << (log2_block_dim)); \
    __VA_ARGS__;                                       \
  } break

#define FIXED_BLOCK_DIM_CASE(...)              \
  FIXED_BLOCK_DIM_CASE_BASE(9, ##__VA_ARGS__); \
  FIXED_BLOCK_DIM_CASE_BASE(8, ##__VA_ARGS__); \
  FIXED_BLOCK_DIM_CASE_BASE(7, ##__VA_ARGS__); \
  FIXED_BLOCK_DIM_CASE_BASE(6, ##__VA_ARGS__); \
  FIXED_BLOCK_DIM_CASE_BASE(5, ##__VA_ARGS__); \
  FIXED_BLOCK_DIM_CASE_BASE(4, ##__VA_ARGS__); \
  FIXED_BLOCK_DIM_CASE_BASE(3, ##__VA_ARGS__); \
  FIXED_BLOCK_DIM_CASE_BASE(2, ##__VA_ARGS__); \
  FIXED_BLOCK_DIM_CASE_BASE(1, ##__VA_ARGS__)

template <typename T>
struct PairForLayerNorm {
  __device__ __forceinline__ PairForLayerNorm() {}
  __device__ __forceinline__ PairForLayerNorm(const T& first, const T& second) : first_(first), second_(second) {}
  T first_;
  T second_;
};

template <typename T>
struct PairForLayerNormAddFunctor {
  __device__ __forceinline__ PairForLayerNorm<T> operator()(const PairForLayerNorm<T>& p1,
                                                            const PairForLayerNorm<T>& p2) {
    return PairForLayerNorm<T>(p1.first_ + p2.first_, p1.second_ + p2.second_);
  }
};

__device__ __forceinline__ float rsqrt_(const float val) { return rsqrtf(val); }

inline static int GetDesiredBlockDim(int64_t block_dim) {
  const int kMaxBlockDim = 512;
  return block_dim >= kMaxBlockDim ? kMaxBlockDim : (1 << static_cast<int>(std::log2(block_dim)));
}

/* kerntune:
args  = ["x: in f16[batch_size * feature_size]", "scale: in f32[feature_size]", "bias: in f32[feature_size]",
         "y: out f16[batch_size * feature_size]", "mean: out f32[batch_size]", "var: out f32[batch_size]",
         "epsilon: f32 = 1e-5", "feature_size: i64 = feature_size"]
sizes = [{ batch_size = 8192, feature_size = 4096 }, { batch_size = 4, feature_size = 5120 },
         { batch_size = 1001, feature_size = 1027 }]
grid  = "batch_size"
block = 512
template_args = ["__half", "float", "512"]
*/
template <typename T, typename U, int BlockDim>
__global__ void LayerNormForward(const T* x, const U* scale, const U* bias, T* y, U* mean, U* var, float epsilon,
                                 int64_t feature_size) {
  __shared__ U mean_share;
  __shared__ U var_share;
  using BlockReduce = cub::BlockReduce<PairForLayerNorm<U>, BlockDim>;
  __shared__ typename BlockReduce::TempStorage temp_storage;

  const int64_t beg_idx = blockIdx.x * feature_size + threadIdx.x;
  const int64_t end_idx = (blockIdx.x + 1) * feature_size;

  // Step 1: reduce to calculate mean and var
  U mean_val = 0;
  U var_val = 0;
  for (int64_t i = beg_idx; i < end_idx; i += BlockDim) {
    const U tmp = static_cast<U>(x[i]);
    mean_val += tmp;
    var_val += (tmp * tmp);
  }
  const auto pair = BlockReduce(temp_storage)
                        .Reduce(PairForLayerNorm<U>(mean_val, var_val), PairForLayerNormAddFunctor<U>());
  if (threadIdx.x == 0) {
    const U tmp = pair.first_ / feature_size;
    mean[blockIdx.x] = mean_share = tmp;
    var[blockIdx.x] = var_share = pair.second_ / feature_size - tmp * tmp;
  }
  __syncthreads();

  mean_val = mean_share;
  const U invvar = rsqrt_(var_share + static_cast<U>(epsilon));

  // Step 2: calculate y
  for (int64_t i = beg_idx, j = threadIdx.x; i < end_idx; i += BlockDim, j += BlockDim) {
    y[i] = static_cast<T>(scale[j] * (static_cast<U>(x[i]) - mean_val) * invvar + bias[j]);
  }
}

// Host side (the LayerNorm functor's forward for fp16 x with fp32 scale / bias). Device pointers.
void layer_norm_forward_fp16(const __half* x, const float* scale, const float* bias, __half* y, float* mean,
                             float* var, float epsilon, int64_t batch_size, int64_t feature_size,
                             cudaStream_t stream) {
  switch (GetDesiredBlockDim(feature_size)) {
    FIXED_BLOCK_DIM_CASE(LayerNormForward<__half, float, kBlockDim>
                         <<<batch_size, kBlockDim, 0, stream>>>(x, scale, bias, y, mean, var, epsilon,
                                                                feature_size));
    default:
      break;
  }
}
