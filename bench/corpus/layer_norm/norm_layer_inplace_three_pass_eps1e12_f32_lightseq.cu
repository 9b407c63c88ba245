// LayerNorm as LightSeq's inference engine writes it (lightseq/inference/kernels/transformerKernels.cc.cu,
// ker_norm_layer with ker_norm_layer_launcher), float32: IN PLACE on the hidden states of a batch of tokens,
//   mean = sum(x) / hidden_size                         (first pass)
//   rstd = rsqrtf(sum((x - mean)^2) / hidden_size + epsilon)   (second pass, exact centered variance)
//   x = (x - mean) * rstd * scale + bias                (third pass, written over x)
// with epsilon the namespace constant 0.000000000001 (1e-12, BERT / fairseq transformers) and no argument for it.
// LightSeq's conventions: (matrix, scale, bias, hidden_size), one token per block, each thread striding a flat
// uint range [block_start + threadIdx.x, block_start + hidden_size) of the whole matrix and indexing the affine
// parameters by i - block_start, __ldg for scale and bias, blockReduceSum (xor shuffles, a static __shared__
// float[32], lanes past the block's warps read 0) publishing through __shared__ s_mean and s_var, three reads of
// the row from global memory; the block size is a RUN-TIME argument of the launcher (max_thread_per_block, the
// model config's 1024), the launcher a template over the type with its own argument order (token_num,
// hidden_size, stream, matrix, scale, bias, max_thread_per_block), explicitly instantiated.
#include <cuda_runtime.h>

namespace lightseq {
namespace cuda {

const float epsilon = 0.000000000001;
const unsigned int WARP_REDUCE_MASK = 0xffffffff;
const unsigned int WARP_SIZE = 32;

template <typename T>
__forceinline__ __device__ T warpReduceSum(T val) {
  for (int mask = (WARP_SIZE >> 1); mask > 0; mask >>= 1)
    val += __shfl_xor_sync(WARP_REDUCE_MASK, val, mask, WARP_SIZE);
  return val;
}

/* Calculate the sum of all elements in a block */
template <typename T>
__forceinline__ __device__ T blockReduceSum(T val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  val = warpReduceSum<T>(val);

  if (lane == 0) shared[wid] = val;
  __syncthreads();

  val = (threadIdx.x < ((blockDim.x + 31) >> 5)) ? shared[lane] : (T)0.0f;
  val = warpReduceSum<T>(val);
  return val;
}

/**
@brief: ker_norm_layer
layer normalization

@thread
gridDim.x = batch_size * batch_seq_len
blockDim.x = max_thread_per_block

@param
matrix: [batch_size, batch_seq_len, hidden_size]
scale: [hidden_size]
bias: [hidden_size]
*/
/* kerntune:
args  = ["matrix: inout f32[token_num * hidden_size]", "scale: in f32[hidden_size]", "bias: in f32[hidden_size]",
         "hidden_size: i32 = hidden_size"]
sizes = [{ token_num = 16384, hidden_size = 1024 }, { token_num = 8, hidden_size = 1024 },
         { token_num = 1001, hidden_size = 1027 }]
grid  = "token_num"
block = 1024
template_args = ["float"]
*/
template <typename T>
__global__ void ker_norm_layer(T* matrix, const T* scale, const T* bias,
                               int hidden_size) {
  uint block_start = blockIdx.x * hidden_size;
  uint start = block_start + threadIdx.x;
  uint end = block_start + hidden_size;
  float val = 0.0;
  for (uint i = start; i < end; i += blockDim.x) {
    val += matrix[i];
  }

  // step 0. compute mean
  __shared__ float s_mean;
  float reduce_res = blockReduceSum<float>(val);
  if (threadIdx.x == 0) s_mean = reduce_res / float(hidden_size);
  __syncthreads();

  // step 1. compute variance
  val = 0.0;
  for (uint i = start; i < end; i += blockDim.x) {
    float tmp = matrix[i] - s_mean;
    val += tmp * tmp;
  }
  __shared__ float s_var;
  reduce_res = blockReduceSum(val);
  if (threadIdx.x == 0)
    s_var = rsqrtf(reduce_res / float(hidden_size) + epsilon);
  __syncthreads();

  // step 2. layer norm
  for (uint i = start; i < end; i += blockDim.x) {
    val = matrix[i] - s_mean;
    matrix[i] = val * s_var * __ldg(&scale[i - block_start]) +
                __ldg(&bias[i - block_start]);
  }
}

template <typename T>
void ker_norm_layer_launcher(int token_num, int hidden_size,
                             cudaStream_t stream, T* matrix, const T* scale,
                             const T* bias, int max_thread_per_block) {
  ker_norm_layer<T><<<token_num, max_thread_per_block, 0, stream>>>(
      matrix, scale, bias, hidden_size);
}

template void ker_norm_layer_launcher<float>(int token_num, int hidden_size,
                                             cudaStream_t stream, float* matrix,
                                             const float* scale,
                                             const float* bias,
                                             int max_thread_per_block);

}  // namespace cuda
}  // namespace lightseq
