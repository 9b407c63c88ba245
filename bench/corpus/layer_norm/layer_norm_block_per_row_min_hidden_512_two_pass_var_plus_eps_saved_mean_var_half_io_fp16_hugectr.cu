// LayerNorm forward in the style of NVIDIA Merlin HugeCTR (HugeCTR/src/layers/layer_norm_layer.cu: layer_norm_kernel<T>
// behind LayerNormLayer<T>::fprop, with the FasterTransformer-derived warpReduceSum / blockReduceSum of utils.cuh),
// __half instantiation (LayerNormLayer<__half>, the layer of HugeCTR's transformer / attention models):
//   in, out [batch, hidden_dim] half, out of place; gamma, beta [hidden_dim] half; argument order out, input,
//   result_var, result_mean, gamma, beta, batch, hidden_dim, eps (a double from the layer's Params)
//   result_mean [batch] and result_var [batch] (the saved statistics for bprop) are stored as T, and the saved
//   "variance" ALREADY INCLUDES eps (s_variance = var / hidden_dim + eps), as bprop's rsqrtf(vars[r]) expects
//   one block per row (grid batch), block min(hidden_dim, MAX_THREADS = 512) striding the row; two passes over
//   global memory for the moments in float (sum, then sum of squared deviations from the shared mean) and a
//   third for the output; __shared__ float s_mean / s_variance written by thread 0; warpReduceSum by
//   __shfl_xor_sync(FINAL_MASK) when the block is one warp, else blockReduceSum (static __shared__ T shared[32])
//   out = T(((x - mean) * rsqrtf(s_variance)) * float(__ldg(gamma)) + float(__ldg(beta))): float math, one
//   rounding at the store
// Fixed: blockReduceSum folded only blockDim.x >> 5 warp partials, dropping the last partial warp, and its
// shuffles ran on partial warps with the full mask whenever hidden_dim (hence the block) is not a multiple of 32;
// the partial count is now rounded up and the launcher rounds the block up to whole warps (the extra threads add
// zeros). The saved mean / variance are stored by thread 0 instead of by every thread of the block.
// Written as a free launcher with a stream instead of the layer's fprop (CudaDeviceContext, Tensor2).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

namespace HugeCTR {
#define WARP_SIZE 32
#define MAX_THREADS 512

namespace {
#define FINAL_MASK 0xffffffff

template <typename T>
__inline__ __device__ T warpReduceSum(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  return val;
}

/* Calculate the sum of all elements in a block */
template <typename T>
__inline__ __device__ T blockReduceSum(T val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  val = warpReduceSum<T>(val);

  if (lane == 0) shared[wid] = val;

  __syncthreads();

  // the launcher gives whole warps; round the partial count up so that no warp's sum is lost
  val = (threadIdx.x < ((blockDim.x + 31) >> 5)) ? shared[lane] : (T)(0.0f);
  val = warpReduceSum<T>(val);

  return val;
}

/* kerntune:
args  = ["out: out f16[batch * hidden]", "input: in f16[batch * hidden]", "result_var: out f16[batch]",
         "result_mean: out f16[batch]", "gamma: in f16[hidden]", "beta: in f16[hidden]", "batch: i32 = batch",
         "hidden_dim: i32 = hidden", "eps: f64 = 1e-5"]
sizes = [{ batch = 32768, hidden = 1024 }, { batch = 4, hidden = 4096 }, { batch = 999, hidden = 1003 }]
grid  = "batch"
block = "min(cdiv(hidden, 32) * 32, 512)"
template_args = ["__half"]
*/
template <typename T>
__global__ void layer_norm_kernel(T* out, const T* __restrict input, T* result_var, T* result_mean,
                                  const T* __restrict gamma, const T* __restrict beta, int batch,
                                  int hidden_dim, double eps) {
  __shared__ float s_mean;
  __shared__ float s_variance;

  float mean = 0.0f;
  float t_mean = 0.0f;
  float variance = 0.0f;
  float t_variance = 0.0f;

  float local_out = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_dim; idx += blockDim.x) {
    local_out = static_cast<float>(input[blockIdx.x * hidden_dim + idx]);
    mean += local_out;
  }
  t_mean = blockDim.x <= 32 ? warpReduceSum<float>(mean) : blockReduceSum<float>(mean);
  if (threadIdx.x == 0) s_mean = t_mean / hidden_dim;
  __syncthreads();

  for (int idx = threadIdx.x; idx < hidden_dim; idx += blockDim.x) {
    local_out = static_cast<float>(input[blockIdx.x * hidden_dim + idx]);
    variance += (local_out - s_mean) * (local_out - s_mean);
  }
  t_variance = blockDim.x <= 32 ? warpReduceSum<float>(variance) : blockReduceSum<float>(variance);
  if (threadIdx.x == 0) s_variance = t_variance / hidden_dim + eps;  // eps kept in the saved variance
  __syncthreads();

  if (threadIdx.x == 0) {
    result_mean[blockIdx.x] = static_cast<T>(s_mean);
    result_var[blockIdx.x] = static_cast<T>(s_variance);
  }

  for (int idx = threadIdx.x; idx < hidden_dim; idx += blockDim.x) {
    local_out = static_cast<float>(input[blockIdx.x * hidden_dim + idx]);
    out[blockIdx.x * hidden_dim + idx] =
        static_cast<T>(((local_out - s_mean) * rsqrtf(s_variance)) * (float)(__ldg(&gamma[idx])) +
                       (float)(__ldg(&beta[idx])));
  }
}
}  // namespace

// in, out: device [batch, hidden_dim] (batch = product of the leading dims); gamma, beta: [hidden_dim];
// result_save_mean, result_save_var: [batch], kept for bprop.
template <typename T>
void layer_norm_fprop(T* out, const T* in, T* result_save_var, T* result_save_mean, const T* gamma, const T* beta,
                      size_t batch, size_t hidden_dim, double eps, cudaStream_t stream) {
  size_t block_x = (hidden_dim + WARP_SIZE - 1) / WARP_SIZE * WARP_SIZE;
  dim3 block_size(std::min(block_x, static_cast<size_t>(MAX_THREADS)), 1, 1);
  dim3 grid_size(batch, 1, 1);

  layer_norm_kernel<<<grid_size, block_size, 0, stream>>>(out, in, result_save_var, result_save_mean, gamma,
                                                          beta, batch, hidden_dim, eps);
}

template void layer_norm_fprop<__half>(__half*, const __half*, __half*, __half*, const __half*, const __half*,
                                       size_t, size_t, double, cudaStream_t);

}  // namespace HugeCTR
