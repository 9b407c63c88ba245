// RMSNorm as nndeploy writes its CUDA op (nndeploy/nndeploy, an AI deployment framework:
// framework/source/nndeploy/op/cuda/op_rmsnorm.cu, RMSNormKernel launched by CudaOpRMSNorm::run; the kernel follows
// the decoder RMSNorm of the RussWong-style LLM engine tutorials, whose signature it keeps). fp32 throughout:
// decoder_out [num_tokens, hidden_units] in, normalized_out [num_tokens, hidden_units] out, decoder_residual
// [num_tokens, hidden_units] out (the first pass COPIES the input row there, saving the residual for the next add),
// scale [hidden_units] the weight; argument order (decoder_out, normalized_out, decoder_residual, scale, eps,
// num_tokens, hidden_units), pointers non-const. One token per block, float4 views of the row (vec_size = 4,
// hidden_units % 4 == 0 assumed: "head size can be divided by 4 and 2"), threads striding the hidden_units / 4
// vectors by blockDim.x; the sum of squares goes through a static-inline blockReduceSum: xor-butterfly warp sums,
// lane 0 of each warp to a static __shared__ warpsum[64], one barrier, every warp re-reduces the first warpnum
// partials; thread 0 writes inv_mean = rsqrtf(sum / hidden_units + eps) to shared memory; the second pass re-reads
// the row and stores out * inv_mean * s per float4 component. Launch: grid num_tokens, default stream.
// Fixed: the original launches block = hidden_units / 4 threads: beyond 1024 (hidden 8192) the launch fails, and a
// count that is not a multiple of 32 (hidden 1028 -> 257 threads) leaves a partial last warp in the full-mask
// __shfl_xor_sync (undefined); the launcher now launches min(1024, round_up(hidden_units / 4, 32)) threads (the
// kernel already strides, surplus threads sum zero). Sizes: 8192 x 4096 (1024 threads), decode 4 x 2048 (512),
// 999 x 1028 (257 vectors -> 288 threads, one live lane in the last warp).
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>

namespace nndeploy {
namespace op {

static __device__ float warpReduceSum(float val) {
  for (int i = 32 / 2; i > 0; i >>= 1) {
    val += __shfl_xor_sync(0xffffffff, val, i);
  }
  return val;  // every lane holds the warp sum
}

static __device__ float blockReduceSum(float val) {
  int tid = threadIdx.x;
  int wid = tid / 32;
  int laneid = tid % 32;
  int warpnum = (blockDim.x + 31) / 32;
  static __shared__ float warpsum[64];
  val = warpReduceSum(val);
  if (laneid == 0) {
    warpsum[wid] = val;
  }
  __syncthreads();
  float sum = tid < warpnum ? warpsum[tid] : 0.0f;
  sum = warpReduceSum(sum);  // every warp re-reduces; thread 0's copy is used
  return sum;
}

/* kerntune:
args  = ["decoder_out: in f32[num_tokens * hidden_units]", "normalized_out: out f32[num_tokens * hidden_units]",
         "decoder_residual: out f32[num_tokens * hidden_units]", "scale: in f32[hidden_units]", "eps: f32 = 1e-6",
         "num_tokens: i32 = num_tokens", "hidden_units: i32 = hidden_units"]
sizes = [{ num_tokens = 8192, hidden_units = 4096 }, { num_tokens = 4, hidden_units = 2048 },
         { num_tokens = 999, hidden_units = 1028 }]
grid  = "num_tokens"
block = "min(1024, round_up(hidden_units / 4, 32))"
*/
static __global__ void RMSNormKernel(float* decoder_out,
                                     float* normalized_out,
                                     float* decoder_residual,
                                     float* scale,
                                     float eps,
                                     int num_tokens,
                                     int hidden_units) {
  int vec_size = 4;
  float thread_sum = 0.0f;
  float4* dout = (float4*)(decoder_out + (size_t)blockIdx.x * hidden_units);
  float4* nout = (float4*)(normalized_out + (size_t)blockIdx.x * hidden_units);
  float4* rsd = (float4*)(decoder_residual + (size_t)blockIdx.x * hidden_units);
  for (int idx = threadIdx.x; idx < hidden_units / vec_size; idx += blockDim.x) {
    float4 vec = dout[idx];
    rsd[idx] = vec;
    thread_sum += vec.x * vec.x;
    thread_sum += vec.y * vec.y;
    thread_sum += vec.z * vec.z;
    thread_sum += vec.w * vec.w;
  }
  thread_sum = blockReduceSum(thread_sum);
  __shared__ float inv_mean;
  if (threadIdx.x == 0) {
    inv_mean = rsqrtf((float)thread_sum / hidden_units + eps);
  }
  __syncthreads();

  float4* s = (float4*)scale;
  for (int idx = threadIdx.x; idx < hidden_units / vec_size; idx += blockDim.x) {
    float4 out = dout[idx];
    nout[idx].x = out.x * inv_mean * s[idx].x;
    nout[idx].y = out.y * inv_mean * s[idx].y;
    nout[idx].z = out.z * inv_mean * s[idx].z;
    nout[idx].w = out.w * inv_mean * s[idx].w;
  }
}

// CudaOpRMSNorm::run without the op / tensor plumbing: input [num_tokens, hidden_units], scale (RMSNorm weights)
// [hidden_units], rsd receives a copy of the input, output the normalized rows; all device fp32.
int CudaRMSNormRun(void* input_data, void* scale_data, void* rsd, void* output_data, float eps, int num_tokens,
                   int hidden_units) {
  if (hidden_units % 4 != 0) {
    fprintf(stderr, "RMSNorm: hidden_units %d is not divisible by 4\n", hidden_units);
    return -1;
  }
  // vec size 4: one thread per float4, rounded up to whole warps and capped at 1024
  int num_threads = std::min(1024, (hidden_units / 4 + 31) / 32 * 32);

  dim3 grid(num_tokens);
  dim3 block(num_threads);
  RMSNormKernel<<<grid, block>>>((float*)input_data, (float*)output_data,
                                 (float*)rsd,
                                 (float*)scale_data,  // RMSNorm weights
                                 eps,                 // RMSNorm eps
                                 num_tokens, hidden_units);
  return 0;
}

}  // namespace op
}  // namespace nndeploy
