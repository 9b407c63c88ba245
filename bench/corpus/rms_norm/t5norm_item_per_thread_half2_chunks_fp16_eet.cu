// RMSNorm (T5 / LLaMA style) as NetEase-FuXi's EET (Easy and Efficient Transformer, csrc/core/layer_norm.cu:
// T5norm1_kernel_opt<item_per_thread> behind RMSnorm<T>) writes it, the fp16 overload:
//   the kernel is a template over item_per_thread, chosen by the host from the row length (1, 2, 4, 8, 16 for
//   n <= 1024, 2048, 4096, 8192, 16384; larger rows are refused), block = ceil(n / (32 * item_per_thread)) * 32
//   halved for half ("if using half, only need half of block.x"), one token per block
//   each thread owns item_per_thread CONSECUTIVE half2 pairs (index tid * item_per_thread + i), loaded with __ldg into
//   float2 registers; the sum of squares from the registers through blockReduceSum_opt (per-thread array sum,
//   xor-shuffle warp sum, static __shared__ float[32], FINAL_MASK macro), rsqrtf(variance / n + eps) in a __shared__
//   float; y = half2(x * s_variance * gamma) with __float22half2_rn, one rounding, fp16 gamma
// EET's launcher takes void* buffers and const int& sizes. Real bug fixed: EET masks the pair index against n (the
// element count) instead of n / 2 (the pair count), so a row whose length is not a multiple of 64 * item_per_thread
// read and wrote past its end (into the next row, and out of bounds on the last); the mask here is n >> 1.
// The block must still be a multiple of 32 (the reduction reads blockDim.x >> 5 warp sums): rows where
// ceil(n / (32 * item_per_thread)) is odd lose their last warp's sum in EET, and are not used here.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <assert.h>
#include <math.h>
#include <iostream>

#define FINAL_MASK 0xffffffff

template <typename T>
__inline__ __device__ T warpReduceSum(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  return val;
}

template <typename T, int item_per_thread>
__inline__ __device__ T warpReduceSum_opt(T* val) {
  T sum_in_thread = 0;
  for (int i = 0; i < item_per_thread; i++) {
    sum_in_thread += val[i];
  }
  for (int mask = 16; mask > 0; mask >>= 1) sum_in_thread += __shfl_xor_sync(FINAL_MASK, sum_in_thread, mask, 32);
  return sum_in_thread;
}

template <typename T, int item_per_thread>
__inline__ __device__ T blockReduceSum_opt(T* val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  T sum_in_warp = warpReduceSum_opt<T, item_per_thread>(val);
  if (lane == 0) shared[wid] = sum_in_warp;
  __syncthreads();

  float l2_val = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane] : (T)(0.0f);
  l2_val = warpReduceSum<T>(l2_val);
  return l2_val;
}

/* kerntune:
args  = ["input: in f16[m * n]", "gamma: in f16[n]", "output: out f16[m * n]", "m: i32 = m", "n: i32 = n",
         "layernorm_eps: f32 = 1e-6"]
sizes = [{ m = 8192, n = 4096 }, { m = 4, n = 4096 }, { m = 1001, n = 3000 }]
grid  = "m"
block = "cdiv(n, 32 * 4) * 32 / 2"
template_args = ["4"]
*/
template <int item_per_thread>
__global__ void T5norm1_kernel_opt(const half* __restrict input, const half* __restrict gamma, half* output, int m,
                                   int n, const float layernorm_eps) {
  const int tid = threadIdx.x;
  __shared__ float s_variance;
  float variance = 0.0f;
  float2 local_out_fp2[item_per_thread];

  const half2* input_ptr = (const half2*)input;
  const half2* gamma_ptr = (const half2*)gamma;
  half2* output_ptr = (half2*)output;

  for (int i = 0; i < item_per_thread; i++) {
    local_out_fp2[i] = (tid * item_per_thread + i) < (n >> 1)
                           ? __half22float2(__ldg(&input_ptr[blockIdx.x * (n >> 1) + tid * item_per_thread + i]))
                           : make_float2(0.0f, 0.0f);
  }

  float tmp[item_per_thread];
  for (int i = 0; i < item_per_thread; i++) {
    tmp[i] = (tid * item_per_thread + i) < (n >> 1)
                 ? local_out_fp2[i].x * local_out_fp2[i].x + local_out_fp2[i].y * local_out_fp2[i].y
                 : 0.0f;
  }

  variance = blockReduceSum_opt<float, item_per_thread>(tmp);
  if (tid == 0) s_variance = rsqrtf(variance / n + layernorm_eps);
  __syncthreads();

  for (int i = 0; i < item_per_thread; i++) {
    if (tid * item_per_thread + i < (n >> 1)) {
      float2 gamma_val = __half22float2(__ldg(&gamma_ptr[tid * item_per_thread + i]));
      local_out_fp2[i].x = local_out_fp2[i].x * s_variance * gamma_val.x;
      local_out_fp2[i].y = local_out_fp2[i].y * s_variance * gamma_val.y;
      output_ptr[blockIdx.x * (n >> 1) + tid * item_per_thread + i] = __float22half2_rn(local_out_fp2[i]);
    }
  }
}

// input, output: [m, n] half; gamma: [n] half; n even, n <= 16384.
template <typename T>
void RMSnorm(const void* input, const void* gamma, void* output, const int& m, const int& n, const float layernorm_eps,
             const cudaStream_t stream) {
  dim3 grid(m);
  dim3 block;

  // n must be less than 16384
  assert(n <= 16384);
  if (n <= 1024) {
    block.x = ceil(n / (32.0 * 1)) * 32;  // item_per_thread = 1
    block.x = block.x / (4 / sizeof(T));  // if using half, only need half of block.x
    T5norm1_kernel_opt<1><<<grid, block, 0, stream>>>((T*)input, (T*)gamma, (T*)output, m, n, layernorm_eps);
  } else if (n <= 2048) {
    block.x = ceil(n / (32.0 * 2)) * 32;  // item_per_thread = 2
    block.x = block.x / (4 / sizeof(T));
    T5norm1_kernel_opt<2><<<grid, block, 0, stream>>>((T*)input, (T*)gamma, (T*)output, m, n, layernorm_eps);
  } else if (n <= 4096) {
    block.x = ceil(n / (32.0 * 4)) * 32;  // item_per_thread = 4
    block.x = block.x / (4 / sizeof(T));
    T5norm1_kernel_opt<4><<<grid, block, 0, stream>>>((T*)input, (T*)gamma, (T*)output, m, n, layernorm_eps);
  } else if (n <= 8192) {
    block.x = ceil(n / (32.0 * 8)) * 32;  // item_per_thread = 8
    block.x = block.x / (4 / sizeof(T));
    T5norm1_kernel_opt<8><<<grid, block, 0, stream>>>((T*)input, (T*)gamma, (T*)output, m, n, layernorm_eps);
  } else if (n <= 16384) {
    block.x = ceil(n / (32.0 * 16)) * 32;  // item_per_thread = 16
    block.x = block.x / (4 / sizeof(T));
    T5norm1_kernel_opt<16><<<grid, block, 0, stream>>>((T*)input, (T*)gamma, (T*)output, m, n, layernorm_eps);
  } else {
    std::cout << "not support size for layernorm" << std::endl;
  }
}

template void RMSnorm<half>(const void* input, const void* gamma, void* output, const int& m, const int& n,
                            const float layernorm_eps, const cudaStream_t stream);
