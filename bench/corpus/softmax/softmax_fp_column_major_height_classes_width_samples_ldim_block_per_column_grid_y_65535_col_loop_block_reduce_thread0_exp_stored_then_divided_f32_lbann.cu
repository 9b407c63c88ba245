// Softmax as LBANN writes its GPU kernels (LLNL/lbann, src/layers/activations/softmax.cu: reduce_max_kernel,
// fp_exp_kernel and fp_output_kernel behind fp_compute_impl for softmax_mode::INSTANCE). LBANN matrices are Hydrogen
// El::Matrix objects: COLUMN-MAJOR, one column per mini-batch sample, height = the sample's features (here the
// classes / vocabulary), width = the local mini-batch, a leading dimension ldim between columns. fp32 (DataType).
// Grid y walks the columns (for col = blockIdx.y; col < width; col += gridDim.y, with grid y capped at 65535), x
// threads stride the rows (row = gidx; row < height; row += blockDim.x * gridDim.x), bsize = 256 a template parameter,
// size_t indices; block reductions through gpu_lib::block_reduce<bsize, 1, 1, T, Op> (warp shuffles, then the warp
// partials through shared memory; the result valid on thread 0 only); three steps: the column max, y = exp(x - max)
// STORED into the output with the sum accumulated, then y /= sum re-reading the output.
// Changed: LBANN launches one kernel per step, with grid x = ceil(height / bsize) blocks per column, the max reduced
// over those blocks by relaunching reduce_max_kernel, the sums merged with atomic_add into a zeroed workspace, and an
// MPI allreduce between steps (the model-parallel layout splits columns over ranks); here the three steps are fused
// into one kernel with grid x = 1 (a block owns a whole column, so thread 0 hands the max and the sum to the block
// through shared memory instead of global workspaces and atomics), one rank. No bug found. Sizes: 32000 classes x 1024
// samples, 32000 x 4, 1001 x 777; ldim = height. atol 1e-6: the probabilities are ~1 / height.
#include <cuda_runtime.h>
#include <cstddef>
#include <algorithm>
#include <cmath>

namespace lbann {

namespace {

/** @brief Max functor */
template <class T>
struct max_op {
  __device__ __forceinline__
  T operator()(const T& x1, const T& x2) const {
    return fmaxf(x1, x2);
  }
};

/** @brief Sum functor */
template <class T>
struct sum_op {
  __device__ __forceinline__
  T operator()(const T& x1, const T& x2) const {
    return x1 + x2;
  }
};

/** @brief Reduction over threads in a 1-D CUDA block; the result is valid on thread 0. */
template <size_t bdimx, class T, class Op>
__device__ __forceinline__
T block_reduce(T val) {
  constexpr size_t warp_size = 32;
  constexpr size_t num_warps = bdimx / warp_size;
  static_assert(bdimx % warp_size == 0, "block must be whole warps");
  Op op;
  const size_t tid = threadIdx.x;
  const size_t lane = tid % warp_size;
  const size_t warp = tid / warp_size;
  for (size_t offset = warp_size / 2; offset > 0; offset /= 2) {
    val = op(val, __shfl_down_sync(0xffffffff, val, offset));
  }
  __shared__ T shared_vals[num_warps];
  if (lane == 0) {
    shared_vals[warp] = val;
  }
  __syncthreads();
  if (tid == 0) {
    for (size_t i = 1; i < num_warps; ++i) {
      val = op(val, shared_vals[i]);
    }
  }
  __syncthreads();
  return val;
}

} // namespace

/** @brief Softmax forward over each matrix column
 *
 *  y = exp(x - max(x)) / sum(exp(x - max(x)))
 *
 *  Block dimensions: bsize x 1 x 1
 *
 *  Grid dimension: 1 x min(width, 65535) x 1
 *
 *  @param input    (height x width) matrix, leading dimension input_ldim
 *  @param output   (height x width) matrix, leading dimension output_ldim
 */
/* kerntune:
args  = ["height: u64 = H", "width: u64 = W", "input: in f32[W * H] ~ uniform(-4, 12)", "input_ldim: u64 = H",
         "output: out f32[W * H]", "output_ldim: u64 = H"]
sizes = [{ H = 32000, W = 1024 }, { H = 32000, W = 4 }, { H = 1001, W = 777 }]
grid  = ["1", "min(W, 65535)"]
block = 256
atol  = 1e-6
template_args = ["256", "float"]
*/
template <size_t bsize, typename TensorDataType>
__global__ void fp_kernel(size_t height,
                          size_t width,
                          const TensorDataType* __restrict__ input,
                          size_t input_ldim,
                          TensorDataType* __restrict__ output,
                          size_t output_ldim) {

  // Indices
  const size_t tid = threadIdx.x;
  const size_t gidx = threadIdx.x + blockIdx.x * blockDim.x;
  const size_t bidy = blockIdx.y;
  const size_t nthreadsx = blockDim.x * gridDim.x;
  const size_t nblocksy = gridDim.y;

  __shared__ TensorDataType shared_shift, shared_denom;

  for (size_t col = bidy; col < width; col += nblocksy) {

    // Find largest value for each thread
    TensorDataType thread_max_val{-INFINITY};
    for (size_t row = gidx; row < height; row += nthreadsx) {
      const auto& val = input[row+col*input_ldim];
      thread_max_val = fmaxf(thread_max_val, val);
    }

    // Find largest value for the column
    const TensorDataType block_max_val
      = block_reduce<bsize, TensorDataType, max_op<TensorDataType>>(thread_max_val);
    if (tid == 0) {
      shared_shift = block_max_val;
    }
    __syncthreads();
    const auto shift = shared_shift;

    // Exponentiate inputs and compute sum for each thread
    TensorDataType thread_sum{0};
    for (size_t row = gidx; row < height; row += nthreadsx) {
      const auto& x = input[row+col*input_ldim];
      auto& y = output[row+col*output_ldim];
      y = expf(x-shift);
      thread_sum += y;
    }

    // Compute sum for the column
    const TensorDataType block_sum
      = block_reduce<bsize, TensorDataType, sum_op<TensorDataType>>(thread_sum);
    if (tid == 0) {
      shared_denom = block_sum;
    }
    __syncthreads();
    const auto denom = shared_denom;

    // Compute layer output
    for (size_t row = gidx; row < height; row += nthreadsx) {
      auto& y = output[row+col*output_ldim];
      y /= denom;
    }
    __syncthreads();

  }

}

/** local_input, local_output: (height x width) column-major device matrices (one sample per column). */
void softmax_fp_compute(size_t local_height, size_t local_width,
                        const float* local_input, size_t input_ldim,
                        float* local_output, size_t output_ldim,
                        cudaStream_t stream) {
  if (local_height == 0 || local_width == 0) {
    return;
  }
  constexpr size_t block_size = 256;
  dim3 block_dims, grid_dims;
  block_dims.x = block_size;
  grid_dims.x = 1;
  grid_dims.y = std::min(local_width, static_cast<size_t>(65535));
  fp_kernel<block_size, float><<<grid_dims, block_dims, 0, stream>>>(
    local_height, local_width,
    local_input, input_ldim,
    local_output, output_ldim);
}

} // namespace lbann
