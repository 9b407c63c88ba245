// Fused residual add + RMSNorm as Infinigence's Inficom kernel library writes it (Inficom, vendored e.g. in
// PAROAttention as Inficom-main: inficom/kernels/norm.cuh residual_rmsnorm_kernel behind inficom/ops/norm/norm.cu
// residual_rmsnorm(R, X, RW), the decoder-layer norm of its fp16 decoding path). fp16 everywhere: x, the residual
// r and the weight rw are [bs, dim] / [dim] half; one row per block, each thread owns 8 consecutive halves
// (j = tid << 3) loaded as one float4 into half2 x_val[4] / r_val[4] / w_val[4]; the residual sum is __hadd2 in
// half and stored to ro (the new residual), the sum of squares taken from that rounded sum in fp32, the block sum
// through Inficom's blockReduceSum (xor butterfly per warp, warp partials in a static __shared__
// warpLevelSums[WARP_SIZE], second butterfly, __shfl_sync broadcast), thread 0 overwrites warpLevelSums[0] with
// rsqrtf(__fdividef(sum, dim) + 1e-5f) (eps a literal), each element x * scaling rounded to half and then
// multiplied by the weight with __hmul2 in half, stored as one float4 to o. Argument order (x, r, rw, bs, dim, o,
// ro); the host residual_rmsnorm passes o = x and ro = r, so the op is in place on both tensors (each thread reads
// its 8 elements before writing them). Grid bs, block DIV_UP(dim, 8) threads (dim % 8 == 0).
// Fixed: (1) `if (j >= dim) return;` before the reduction let threads leave before the barriers of blockReduceSum;
// idle threads now stay, with zero contributions and no loads or stores. (2) blockReduceSum took the warp count as
// blockDim.x / 32 (a trailing partial warp's partial sum was dropped, and a block under 64 threads divided by zero)
// and ran full-mask shuffles in a partial warp: the launcher rounds the block up to whole warps and the second
// stage reads ceil(blockDim.x / 32) partials. (3) Thread 0 overwrote warpLevelSums[0] while other warps could still
// be reading it in the second stage: a __syncthreads() before that write. __forceinline__ on __global__ dropped.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

#define WARP_SIZE 32
#define DIV_UP(x, y) ((x) + (y) - 1) / (y)

__device__ __forceinline__ float blockReduceSum(float reducing, float *shared_mem)
{
    const int32_t WPT = (blockDim.x + 31) / 32;
    const int32_t lane_id = threadIdx.x % 32;
    const int32_t warp_id = threadIdx.x / 32;

# pragma unroll
    for (int32_t mask = 16; mask >= 1; mask /= 2) {
        reducing += __shfl_xor_sync(uint32_t(-1), reducing, mask);
    }

    if (lane_id == 0) shared_mem[warp_id] = reducing;
    __syncthreads();

    reducing = lane_id < WPT ? shared_mem[lane_id] : 0.0f;

# pragma unroll
    for (int32_t mask = 16; mask >= 1; mask /= 2) {
        reducing += __shfl_xor_sync(uint32_t(-1), reducing, mask);
    }
    reducing = __shfl_sync(uint32_t(-1), reducing, 0);
    return reducing;
}

/*
    add residual + RMSNorm fused kernel.
*/
/* kerntune:
args  = ["x: in f16[bs * dim]", "r: in f16[bs * dim]", "rw: in f16[dim]", "bs: i32 = bs", "dim: i32 = dim",
         "o: out f16[bs * dim]", "ro: out f16[bs * dim]"]
sizes = [{ bs = 16384, dim = 4096 }, { bs = 4, dim = 5120 }, { bs = 999, dim = 1000 }]
grid  = "bs"
block = "cdiv(cdiv(dim, 8), 32) * 32"
*/
__global__ void residual_rmsnorm_kernel(
                                half* x, half* r, half* rw,
                                int bs, int dim,
                                half* o, half* ro){

  int bid = blockIdx.x;
  int tid = threadIdx.y * blockDim.x + threadIdx.x;
  int j = tid << 3;
  const bool active = j < dim;

  half2 x_val[4];
  half2 i_val[4];
  half2 r_val[4];
  half2 w_val[4];
  float pow_sum = 0.0f;

  if (active) {
    *(float4*)(&x_val[0]) = *(float4*)(&x[(int64_t)bid * dim + j]);
    *(float4*)(&r_val[0]) = *(float4*)(&r[(int64_t)bid * dim + j]);
    *(float4*)(&w_val[0]) = *(float4*)(&rw[j]);

    // residual
    i_val[0] = __hadd2(x_val[0], r_val[0]);
    i_val[1] = __hadd2(x_val[1], r_val[1]);
    i_val[2] = __hadd2(x_val[2], r_val[2]);
    i_val[3] = __hadd2(x_val[3], r_val[3]);

    // store intermediate value
    *(float4*)(&ro[(int64_t)bid * dim + j]) = *(float4*)(&i_val[0]);

    // RMSNorm (float)
#pragma unroll
    for (int i = 0; i < 4; i++){
      pow_sum += __half2float(i_val[i].x) * __half2float(i_val[i].x);
      pow_sum += __half2float(i_val[i].y) * __half2float(i_val[i].y);
    }
  }

  // block reduce to get mean
  static __shared__ float warpLevelSums[WARP_SIZE];

  pow_sum = blockReduceSum(pow_sum, warpLevelSums);
  __syncthreads();
  if (tid == 0){
    warpLevelSums[0] = rsqrtf(__fdividef(pow_sum, (float)dim) + 1e-5f);
  }
  __syncthreads();

  if (!active) {return;}

  // normalization
  float scaling = warpLevelSums[0];
#pragma unroll
  for (int i = 0; i < 4; i++){
    x_val[i].x = __float2half(__half2float(i_val[i].x) * scaling);
    x_val[i].y = __float2half(__half2float(i_val[i].y) * scaling);
  }
  x_val[0] = __hmul2(x_val[0], w_val[0]);
  x_val[1] = __hmul2(x_val[1], w_val[1]);
  x_val[2] = __hmul2(x_val[2], w_val[2]);
  x_val[3] = __hmul2(x_val[3], w_val[3]);

  // store intermediate value
  *(float4*)(&o[(int64_t)bid * dim + j]) = *(float4*)(&x_val[0]);
}

// R: residual [bs, 1, dim] (updated in place to x + r), X: hidden states [bs, 1, dim] (overwritten with the
// normalized output), RW: [dim]; all fp16 device pointers, dim % 8 == 0.
void residual_rmsnorm(half* R, half* X, half* RW, int bs, int dim, cudaStream_t stream) {
  int threads = DIV_UP(DIV_UP(dim, 8), WARP_SIZE) * WARP_SIZE;  // whole warps
  residual_rmsnorm_kernel<<<dim3(bs), dim3(threads, 1), 0, stream>>>(
        X, R, RW,
        bs, dim,
        X, R);
}
