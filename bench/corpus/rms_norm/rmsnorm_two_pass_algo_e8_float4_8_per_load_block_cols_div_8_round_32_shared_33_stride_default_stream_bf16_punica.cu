// RMSNorm as Punica (punica-ai/punica, the multi-LoRA serving system) writes it: csrc/rms_norm/rms_norm_cutlass.cu
// (earlier punica/ops/csrc/rms_norm/), rmsnorm_twoPassAlgo_e8<half, half2> behind rms_norm<T>(output, input, weight,
// rows, columns, epsilon) and punica_ops.cc dispatch_rms_norm; Punica took it from CUTLASS's tools/util
// device_rmsnorm.h and added the bf16 instantiation (the same file is vendored again by MIT Han lab's Quest).
// Style: the kernel sees every tensor as float4 (8 packed 16-bit values), the pointer arguments typed float4*, a
// template over the scalar type and its pair type (here __nv_bfloat16 / __nv_bfloat162) used to reinterpret the four
// 32-bit words of each float4; one row per block, grid = rows; block = min(1024, round_up(columns / 8, 32)), each
// thread strides the row's columns / 8 float4 by blockDim.x. Two passes over global memory: the first sums the
// squares of all 8 values of each float4 in fp32 (static_cast<float> on the pair members), the second re-reads x and
// the weight as float4 and writes x * s_mean * w rounded once to the storage type. The sum goes through the CUTLASS
// blockReduceSum<T, NUM> (array of NUM values, xor butterfly per warp, __shared__ T shared[NUM][33], lanes below
// blockDim.x / 32.f read the warp partials, a second butterfly); thread 0 then stores rsqrtf(sum / n + epsilon) in
// __shared__ float s_mean (named "mean", it holds the reciprocal RMS). Argument order (output, input, weight, m, n,
// epsilon), m unused. columns % 8 != 0 is refused by the host function (returns false). Launched on the default
// stream (no stream argument), as Punica does.
// No bug found; the block is always a whole number of warps, so the full-mask shuffles and the shared[NUM][33]
// partials (at most 32 warps) are safe. Sizes: a large prefill batch, a decode batch, and an odd row count with
// 1000 columns (125 float4 per row: 3 idle threads in a 128-thread block).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <float.h>

#include <algorithm>
#include <type_traits>

// CUTLASS-style reductions over an array of NUM partial sums (NUM = 1 here); the result is left in val[] of every
// lane of every warp after the second butterfly.
template <typename T, int NUM>
__inline__ __device__ T warpReduceSum(T *val) {
#pragma unroll
  for (int k = 0; k < NUM; k++) {
#pragma unroll
    for (int step = 16; step >= 1; step /= 2)
      val[k] += __shfl_xor_sync(0xffffffff, val[k], step, 32);
  }
  return (T)(0.0f);
}

template <typename T, int NUM>
__inline__ __device__ T blockReduceSum(T *val) {
  __shared__ T shared[NUM][33];
  const int lane = threadIdx.x & 0x1f;
  const int warp = threadIdx.x >> 5;

  warpReduceSum<T, NUM>(val);
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < NUM; k++) shared[k][warp] = val[k];
  }
  __syncthreads();

  // lanes below the warp count pick up one warp partial each
  const bool has_partial = threadIdx.x < (blockDim.x / 32.f);
#pragma unroll
  for (int k = 0; k < NUM; k++) val[k] = has_partial ? shared[k][lane] : (T)(0.0f);
  warpReduceSum<T, NUM>(val);
  return (T)0.0f;
}

/* kerntune:
args  = ["output: out bf16[rows * columns]", "input: in bf16[rows * columns]", "weight: in bf16[columns]",
         "m: i32 = rows", "n: i32 = columns", "epsilon: f32 = 1e-6"]
sizes = [{ rows = 16384, columns = 4096 }, { rows = 4, columns = 5120 }, { rows = 999, columns = 1000 }]
grid  = "rows"
block = "min(1024, cdiv(columns / 8, 32) * 32)"
template_args = ["__nv_bfloat16", "__nv_bfloat162"]
*/
template <typename half, typename half2>
__global__ void rmsnorm_twoPassAlgo_e8(float4 *__restrict__ output,
                                       const float4 *__restrict__ input,
                                       const float4 *__restrict__ weight, int m,
                                       int n, float epsilon) {
  // one block per row; a float4 carries 8 packed 16-bit values
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  const int nthreads = blockDim.x;
  const int n_8 = n / 8;
  __shared__ float s_mean;  // holds 1 / rms
  float local_sums[1] = {0.0f};

  const float4 *row_in = input + row * n_8;
  float4 *row_out = output + row * n_8;

  // pass 1: sum of squares in fp32
  for (int index = tid; index < n_8; index += nthreads) {
    const float4 packed = row_in[index];
    const half2 *w0 = (const half2 *)&packed.x;
    const half2 *w1 = (const half2 *)&packed.y;
    const half2 *w2 = (const half2 *)&packed.z;
    const half2 *w3 = (const half2 *)&packed.w;
    const float a0 = static_cast<float>(w0->x), a1 = static_cast<float>(w0->y);
    const float a2 = static_cast<float>(w1->x), a3 = static_cast<float>(w1->y);
    const float a4 = static_cast<float>(w2->x), a5 = static_cast<float>(w2->y);
    const float a6 = static_cast<float>(w3->x), a7 = static_cast<float>(w3->y);
    local_sums[0] += a0 * a0 + a1 * a1 + a2 * a2 + a3 * a3 + a4 * a4 + a5 * a5 + a6 * a6 + a7 * a7;
  }

  blockReduceSum<float, 1>(local_sums);
  if (tid == 0) {
    s_mean = rsqrtf(local_sums[0] / n + epsilon);
  }
  __syncthreads();

  // pass 2: re-read x and the weight, one rounding per output value
  for (int index = tid; index < n_8; index += nthreads) {
    const float4 xv = row_in[index];
    const float4 gv = weight[index];
    const half2 *x2 = (const half2 *)&xv;
    const half2 *g2 = (const half2 *)&gv;

    float4 res;
    half2 *r2 = (half2 *)&res;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      r2[k].x = static_cast<half>(static_cast<float>(x2[k].x) * s_mean * static_cast<float>(g2[k].x));
      r2[k].y = static_cast<half>(static_cast<float>(x2[k].y) * s_mean * static_cast<float>(g2[k].y));
    }
    row_out[index] = res;
  }
}

// output, input: device [rows, columns], weight: [columns]; all nv_half or nv_bfloat16. Returns false when no kernel
// fits (columns % 8 != 0 or another dtype).
template <typename T>
bool rms_norm(T *__restrict__ output, const T *__restrict__ input,
              const T *__restrict__ weight, int rows, int columns,
              float epsilon) {
  if (columns % 8 != 0) {
    return false;
  }

  dim3 grid(rows);
  dim3 block(std::min(1024, (columns / 8 + 31) / 32 * 32));

  if (std::is_same<T, nv_half>::value) {
    rmsnorm_twoPassAlgo_e8<nv_half, nv_half2>
        <<<grid, block>>>((float4 *)output, (float4 *)input, (float4 *)weight,
                          rows, columns, epsilon);
    return true;
  } else if (std::is_same<T, nv_bfloat16>::value) {
    rmsnorm_twoPassAlgo_e8<nv_bfloat16, nv_bfloat162>
        <<<grid, block>>>((float4 *)output, (float4 *)input, (float4 *)weight,
                          rows, columns, epsilon);
    return true;
  }
  return false;
}

template bool rms_norm(nv_half *__restrict__ output,
                       const nv_half *__restrict__ input,
                       const nv_half *__restrict__ weight, int rows,
                       int columns, float epsilon);
template bool rms_norm(nv_bfloat16 *__restrict__ output,
                       const nv_bfloat16 *__restrict__ input,
                       const nv_bfloat16 *__restrict__ weight, int rows,
                       int columns, float epsilon);
