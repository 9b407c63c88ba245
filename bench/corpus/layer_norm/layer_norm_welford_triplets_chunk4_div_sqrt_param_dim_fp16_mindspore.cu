// LayerNorm forward as MindSpore's GPU backend writes it (plugin/device/gpu/kernel/cuda_impl/cuda_ops/
// layer_norm_impl.cu: LayerNormKernel<T> behind LayerNorm<T>, the LayerNorm GPU kernel mod), the float16 instance:
//   argument order (row_dim, col_dim, param_dim, epsilon, x, gamma, beta, y, mean, var); gamma / beta indexed by
//   pos % param_dim (gamma may cover only the trailing param_dim of the normalized axes); fp16 x / gamma / beta / y,
//   float mean and var outputs [row_dim] (var is the biased variance, not rstd)
//   Welford with a float count: each thread walks chunks of NUM_PER_THREAD_REDUCE = 4 consecutive columns (chunk i
//   strided by blockDim.x, returning at the row's end), then (mean, var, num) merged down each warp by three
//   __shfl_down_sync per step (MeanAndVarMerge, Chan's formula), lane 0 of each warp parks its triple in dynamic
//   shared memory (DynamicSharedMem<float>, blockDim / 32 * 3 floats), a halving tree over the warps' triples,
//   thread 0 divides var by col_dim and writes mean / var
//   y = T((x - mean) / general_sqrt(var + epsilon) * gamma + beta): a division by a sqrt for every element, fp32
//   math, one rounding
//   launch: one row per block (for row = blockIdx.x; row < row_dim; row += gridDim.x, grid = row_dim), constexpr
//   256 threads, dynamic smem 256 / 32 * 3 * sizeof(float)
// MindSpore's launcher takes a TiledLayerNormKernel (8-wide TArray loads) when col_dim == param_dim and both row_dim and
// col_dim are multiples of 8; that branch is not written: these size sets all have a row count (total tokens of a
// batch, decode batch) that is not a multiple of 8, which takes this kernel.
// Real bug fixed: the halving tree over the warp triples ran with no barrier between its steps (threads 0..3 of
// warp 0 reading triples other lanes had just written); a __syncwarp() now ends each step.
// MindSpore marks the explicit instantiations `template CUDA_LIB_EXPORT void LayerNorm(...)` (an export macro, empty
// here); kerntune's parser does not read a macro there, so they are written without it.
#include <stdio.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>


template <typename T>
struct DynamicSharedMem;
template <>
struct DynamicSharedMem<float> {
  __device__ float *addr() {
    extern __shared__ float addr_float[];
    return addr_float;
  }
};

constexpr int NUM_PER_THREAD_REDUCE = 4;
constexpr int WARP_SIZE = 32;

template <typename T>
inline __device__ T general_sqrt(T val) {
  return (T)sqrt(static_cast<float>(val));
}

template <typename T>
inline __device__ void MeanAndVarAccumulation(T *mean, T *var, T *num, const T &val) {
  // Welford: mean_k = mean_{k-1} + (x_k - mean_{k-1}) / k; M2_k = M2_{k-1} + (x_k - mean_{k-1}) * (x_k - mean_k)
  num[0]++;
  T mean_new = mean[0] + (val - mean[0]) / num[0];
  var[0] = var[0] + (val - mean[0]) * (val - mean_new);
  mean[0] = mean_new;
}

template <typename T>
inline __device__ void MeanAndVarMerge(T *m1, T *v1, T *n1, const T &m2, const T &v2, const T &n2) {
  T zero = 0;
  if (n2 == zero) {
    return;
  }
  T count = n1[0] + n2;
  v1[0] = v1[0] + v2 + (m1[0] - m2) * (m1[0] - m2) * n1[0] * n2 / count;
  m1[0] = (n1[0] * m1[0] + n2 * m2) / count;
  n1[0] = count;
}

template <typename T>
inline __device__ void ThreadReduce(const int col_dim, const T *block_addr, float *mean, float *var, float *num) {
  int loop_num = (col_dim + NUM_PER_THREAD_REDUCE - 1) / NUM_PER_THREAD_REDUCE;
  for (int i = threadIdx.x; i < loop_num; i += blockDim.x) {
    for (int j = 0; j < NUM_PER_THREAD_REDUCE; j++) {
      int pos = NUM_PER_THREAD_REDUCE * i + j;
      if (pos >= col_dim) {
        return;
      }
      MeanAndVarAccumulation(mean, var, num, static_cast<float>(block_addr[pos]));
    }
  }
}

template <typename T>
inline __device__ void WarpReduce(T *mean, T *var, T *num) {
  for (int delta = (WARP_SIZE >> 1); delta > 0; delta >>= 1) {
    T mean_other = __shfl_down_sync(0xffffffff, mean[0], delta);
    T var_other = __shfl_down_sync(0xffffffff, var[0], delta);
    T num_other = __shfl_down_sync(0xffffffff, num[0], delta);
    MeanAndVarMerge(mean, var, num, mean_other, var_other, num_other);
  }
}

template <typename T>
inline __device__ void BlockReduce(const int col_dim, T *mean, T *var, T *num, T *mean_addr, T *var_addr,
                                   T *share_mem) {
  // thread(0, 32, 64, 96, ...) keep the data
  if (threadIdx.x % WARP_SIZE == 0) {
    int offset = threadIdx.x / WARP_SIZE * 3;
    share_mem[offset] = mean[0];
    share_mem[offset + 1] = var[0];
    share_mem[offset + 2] = num[0];
  }
  __syncthreads();

  for (int stride = blockDim.x / WARP_SIZE / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      int offset = (threadIdx.x + stride) * 3;
      MeanAndVarMerge(&share_mem[threadIdx.x * 3], &share_mem[threadIdx.x * 3 + 1], &share_mem[threadIdx.x * 3 + 2],
                      share_mem[offset], share_mem[offset + 1], share_mem[offset + 2]);
    }
    __syncwarp();
  }
  __syncthreads();

  if (threadIdx.x == 0) {
    mean_addr[blockIdx.x] = share_mem[0];
    share_mem[1] /= col_dim;
    var_addr[blockIdx.x] = share_mem[1];
  }
}

template <typename T>
inline __device__ void LayerNorm(const int row, const int col_dim, const int param_dim, const T *x,
                                 const float *share_mem, const T *gamma, const T *beta, const float epsilon, T *y) {
  for (int col = threadIdx.x; col < col_dim; col += blockDim.x) {
    int pos = row * col_dim + col;
    int i = pos % param_dim;
    float tmp_y = (static_cast<float>(x[pos]) - share_mem[0]) / general_sqrt(share_mem[1] + epsilon) *
                    static_cast<float>(gamma[i]) +
                  static_cast<float>(beta[i]);
    y[pos] = (T)(tmp_y);
  }
}

/* kerntune:
args  = ["row_dim: i32 = row_dim", "col_dim: i32 = col_dim", "param_dim: i32 = col_dim", "epsilon: f32 = 1e-5",
         "x: in f16[row_dim * col_dim]", "gamma: in f16[col_dim]", "beta: in f16[col_dim]",
         "y: out f16[row_dim * col_dim]", "mean_addr: out f32[row_dim]", "var_addr: out f32[row_dim]"]
sizes = [{ row_dim = 8191, col_dim = 4096 }, { row_dim = 4, col_dim = 4096 }, { row_dim = 1001, col_dim = 5123 }]
grid  = "row_dim"
block = 256
smem  = "256 / 32 * 3 * 4"
template_args = ["half"]
*/
template <typename T>
__global__ void LayerNormKernel(const int row_dim, const int col_dim, const int param_dim, const float epsilon,
                                const T *x, const T *gamma, const T *beta, T *y, float *mean_addr, float *var_addr) {
  for (auto row = blockIdx.x; row < row_dim; row += gridDim.x) {
    float mean = 0;
    float var = 0;
    float num = 0;
    const T *block_addr = x + row * col_dim;
    DynamicSharedMem<float> share_mem;

    ThreadReduce(col_dim, block_addr, &mean, &var, &num);
    WarpReduce(&mean, &var, &num);
    BlockReduce(col_dim, &mean, &var, &num, mean_addr, var_addr, share_mem.addr());

    __syncthreads();
    LayerNorm(row, col_dim, param_dim, x, share_mem.addr(), gamma, beta, epsilon, y);
  }
}

// x, y: [row_dim, col_dim]; gamma, beta: [param_dim]; mean, var: [row_dim] float; device pointers.
template <typename T>
void LayerNorm(const int row_dim, const int col_dim, const int param_dim, const float epsilon, const T *x,
               const T *gamma, const T *beta, T *y, float *mean, float *var, cudaStream_t stream) {
  const int thread_per_block = 256;
  // keep the mean/var/num after warp reduce
  int share_mem_size = thread_per_block / WARP_SIZE * 3 * sizeof(float);
  LayerNormKernel<<<row_dim, thread_per_block, share_mem_size, stream>>>(row_dim, col_dim, param_dim, epsilon, x,
                                                                         gamma, beta, y, mean, var);
}

template void LayerNorm(const int row_dim, const int col_dim, const int param_dim, const float epsilon,
                      const float *x, const float *gamma, const float *beta, float *y, float *mean,
                      float *var, cudaStream_t stream);
template void LayerNorm(const int row_dim, const int col_dim, const int param_dim, const float epsilon,
                      const half *x, const half *gamma, const half *beta, half *y, float *mean,
                      float *var, cudaStream_t stream);
