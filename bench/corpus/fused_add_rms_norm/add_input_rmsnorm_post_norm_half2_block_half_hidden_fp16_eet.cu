// Residual add + RMSNorm as NetEase-FuXi's EET (Easy and Efficient Transformer, csrc/core/layer_norm.cu:
// add_input_RMSnorm behind add_bias_input_layernorm_kernel<T> when the bias is null, the T5 post-attention /
// post-FFN norm of its encoder-decoder models) writes it, the fp16 overload:
//   out = RMSNorm(out + input) * gamma IN PLACE over out (the branch output arrives in out, the residual stream in
//   input); the sum is NOT stored anywhere else: the normed row replaces it (post-norm contract)
//   one token per block and ONE half2 pair per thread: block = n / 2 (so n / 2 <= 1024 is asserted), grid = m
//   the add in half arithmetic (__hadd2, rounded to fp16), then float2; float sum of squares through blockReduceSum
//   (xor-shuffle warp sums, static __shared__ float[32], FINAL_MASK macro); rsqrtf(variance / n + eps) in a
//   __shared__ float; y = __float22half2_rn(x * s_variance * gamma), one rounding; __ldg on gamma
// EET's launcher takes void* buffers and int references; its other branches (a bias makes it the post-LayerNorm
// add_bias_input_layernorm; m >= 512 with n == 768 or 1024 takes a 4-pairs-per-thread _v2 kernel) are not written.
// The block must be a multiple of 32 (the reduction reads blockDim.x >> 5 warp sums), so n a multiple of 64.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <assert.h>

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

  val = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane] : (T)(0.0f);
  val = warpReduceSum<T>(val);
  return val;
}

/* kerntune:
args  = ["out: inout f16[m * n]", "input: in f16[m * n]", "gamma: in f16[n]", "m: i32 = m", "n: i32 = n",
         "layernorm_eps: f32 = 1e-6"]
sizes = [{ m = 16384, n = 2048 }, { m = 8, n = 2048 }, { m = 1001, n = 1344 }]
grid  = "m"
block = "n / 2"
*/
__global__ void add_input_RMSnorm(half* out, const half* input, const half* gamma, int m, int n,
                                  const float layernorm_eps) {
  int tid = threadIdx.x;
  __shared__ float s_variance;
  float variance = 0.0f;
  float2 local_out_fp2;

  half2* out_ptr = (half2*)out;
  const half2* input_ptr = (const half2*)input;
  const half2* gamma_ptr = (const half2*)gamma;

  int id = blockIdx.x * n / 2 + tid;
  local_out_fp2 = __half22float2(__hadd2(out_ptr[id], input_ptr[id]));

  variance = local_out_fp2.x * local_out_fp2.x;
  variance += local_out_fp2.y * local_out_fp2.y;
  variance = blockReduceSum<float>(variance);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / n + layernorm_eps);
  __syncthreads();

  float2 gamma_val = __half22float2(__ldg(&gamma_ptr[tid]));
  local_out_fp2.x = (local_out_fp2.x) * s_variance * gamma_val.x;
  local_out_fp2.y = (local_out_fp2.y) * s_variance * gamma_val.y;
  out_ptr[id] = __float22half2_rn(local_out_fp2);
}

// output (in/out), input: [m, n] half; gamma: [n] half; bias and beta must be null here (the RMSNorm path).
template <class T>
void add_bias_input_layernorm_kernel(void* output, const void* input, const void* bias, const void* gamma,
                                     const void* beta, const int& m, const int& n, const float layernorm_eps,
                                     const cudaStream_t stream) {
  assert(bias == nullptr && beta == nullptr);
  dim3 grid(m);
  dim3 block(n / 2);
  assert(n / 2 <= 1024);
  add_input_RMSnorm<<<grid, block, 0, stream>>>((T*)output, (T*)input, (T*)gamma, m, n, layernorm_eps);
}

template void add_bias_input_layernorm_kernel<half>(void* output, const void* input, const void* bias,
                                                    const void* gamma, const void* beta, const int& m, const int& n,
                                                    const float layernorm_eps, const cudaStream_t stream);
