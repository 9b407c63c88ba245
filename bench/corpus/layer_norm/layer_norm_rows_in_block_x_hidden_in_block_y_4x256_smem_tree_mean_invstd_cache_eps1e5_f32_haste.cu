// LayerNorm forward in the style of LMNT's haste (lmnt-com/haste, lib/layer_norm_forward_gpu.cu.cc: the LayerNorm
// kernel behind haste::v0::layer_norm::ForwardPass<T>::Run / RunPartial, used by its LayerNormGRU / LayerNormLSTM
// layers), float instantiation:
//   x, y [batch_size, hidden_size] row-major, out of place; cache [batch_size, 2] receives (mean, invstd) per row for
//   the backward pass; gamma [hidden_size] always applied, beta only when the ApplyBeta template flag is set (the
//   launcher picks it from whether beta is non-null); eps 1e-5 hard-coded inside the kernel
//   argument order batch_size, hidden_size, gamma, beta, x, y, cache; template <typename T, bool ApplyBeta>
//   launch: dim3 blockDim(4, 256) -- threadIdx.x picks one of 4 ROWS, threadIdx.y strides that row's hidden_size --
//   grid ceil(batch / 4), dynamic shared memory sizeof(T) * 4 * 256 (256 slots per row)
//   two-pass moments in T (float): shared-memory halving tree for the sum, barrier, mean, barrier, tree for the
//   sum of squared differences, invstd = rsqrt(var + 1e-5); a third pass re-reads x from global memory and writes
//   (x - mean) * invstd * gamma (+ beta)
// Fixed: the original returns early for threads whose row is past batch_size and then reaches __syncthreads() in
// the rest of the block (a barrier not reached by the whole block is undefined behaviour when batch_size is not a
// multiple of 4); here the out-of-range rows skip their loads and stores but keep reaching every barrier.
// The ForwardPass class is written as a plain launcher taking the stream; the partial_ offset is zero.
#include <cuda_runtime.h>

namespace {

/* kerntune:
args  = ["batch_size: i32 = batch", "hidden_size: i32 = hidden", "gamma: in f32[hidden]", "beta: in f32[hidden]",
         "x: in f32[batch * hidden]", "y: out f32[batch * hidden]", "cache: out f32[batch * 2]"]
sizes = [{ batch = 8192, hidden = 2048 }, { batch = 3, hidden = 1024 }, { batch = 1001, hidden = 1537 }]
template_args = ["float", "true"]
grid  = "cdiv(batch, 4)"
block = [4, 256]
smem  = 4096
*/
template<typename T, bool ApplyBeta>
__global__
void LayerNorm(
    const int batch_size,
    const int hidden_size,
    const T* gamma,
    const T* beta,
    const T* x,
    T* y,
    T* cache) {
  const int batch = blockDim.x * blockIdx.x + threadIdx.x;
  // Rows past the end still take part in every __syncthreads() below.
  const bool active = batch < batch_size;

  extern __shared__ int shared_var[];
  T* shared = reinterpret_cast<T*>(shared_var);
  const int index = threadIdx.y;
  const int stride = blockDim.y;
  const int batch_idx = batch * hidden_size;
  const int batch_block_idx = threadIdx.x * stride;

  // Sum of the row.
  T sum = static_cast<T>(0.0);
  if (active) {
    for (int i = index; i < hidden_size; i += stride)
      sum += x[batch_idx + i];
  }
  shared[batch_block_idx + index] = sum;
  __syncthreads();

  for (int s = stride / 2; s > 0; s >>= 1) {
    if (index < s)
      shared[batch_block_idx + index] += shared[batch_block_idx + index + s];
    __syncthreads();
  }

  // Everyone reads the sum before the slots are overwritten below.
  const T mean = shared[batch_block_idx] / hidden_size;
  __syncthreads();

  // Sum of squared differences from the mean.
  T sumsq = static_cast<T>(0.0);
  if (active) {
    for (int i = index; i < hidden_size; i += stride) {
      const T diff = x[batch_idx + i] - mean;
      sumsq += diff * diff;
    }
  }
  shared[batch_block_idx + index] = sumsq;
  __syncthreads();

  for (int s = stride / 2; s > 0; s >>= 1) {
    if (index < s)
      shared[batch_block_idx + index] += shared[batch_block_idx + index + s];
    __syncthreads();
  }

  const T invstd = rsqrt(shared[batch_block_idx] / hidden_size + static_cast<T>(1e-5));

  if (!active)
    return;  // no barrier follows

  for (int i = index; i < hidden_size; i += stride) {
    if (ApplyBeta)
      y[batch_idx + i] = (x[batch_idx + i] - mean) * invstd * gamma[i] + beta[i];
    else
      y[batch_idx + i] = (x[batch_idx + i] - mean) * invstd * gamma[i];
  }

  if (index == 0) {
    cache[batch * 2 + 0] = mean;
    cache[batch * 2 + 1] = invstd;
  }
}

}  // anonymous namespace

namespace haste {
namespace v0 {
namespace layer_norm {

// x, y: device [batch_size, hidden_size]; gamma, beta: device [hidden_size] (beta may be null); cache: device
// [batch_size, 2].
template<typename T>
void LayerNormForward(
    const cudaStream_t& stream,
    const int batch_size,
    const int hidden_size,
    const T* gamma,
    const T* beta,
    const T* x,
    T* y,
    T* cache) {
  dim3 blockDim(4, 256);
  dim3 gridDim;
  gridDim.x = (batch_size + blockDim.x - 1) / blockDim.x;
  const int shared_mem_size = sizeof(T) * blockDim.x * blockDim.y;

  if (beta) {
    LayerNorm<T, true><<<gridDim, blockDim, shared_mem_size, stream>>>(
        batch_size, hidden_size, gamma, beta, x, y, cache);
  } else {
    LayerNorm<T, false><<<gridDim, blockDim, shared_mem_size, stream>>>(
        batch_size, hidden_size, gamma, nullptr, x, y, cache);
  }
}

template void LayerNormForward<float>(const cudaStream_t&, const int, const int, const float*, const float*,
                                      const float*, float*, float*);

}  // namespace layer_norm
}  // namespace v0
}  // namespace haste
