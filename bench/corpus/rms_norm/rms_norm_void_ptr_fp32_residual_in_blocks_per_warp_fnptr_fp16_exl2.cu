// RMSNorm as ExLlamaV2 writes it (exllamav2_ext/cuda/rms_norm.cu, rms_norm_kernel<blocks_per_warp> behind
// rms_norm_cuda), on its fp32 residual-stream path: the hidden state arrives as FLOAT (input_fp32 = true: the
// residual stream is kept in fp32 between layers) and the normalized row is written as fp16 for the next GEMM:
//   y = half(x * w * rsqrtf(sum(x^2) * r_dim + epsilon))       r_dim = 1 / dim computed on the host
// with x, w and the inverse rms multiplied in float in that order and one rounding (the fp16 input path clamps x to
// +-65504 first; not taken here). ExLlamaV2's conventions: x and y are `void*` whose element type is decided by two
// RUN-TIME flags (input_fp32, output_fp32) and a third flag add_residual makes the kernel ADD the normalized row
// into y instead of storing it (spec: false / true / false); a fixed block of NUM_THREADS = NUM_WARPS * WARP_SIZE =
// 1024 threads whatever the row length, one row per block, each thread holding blocks_per_warp pairs (float2 or
// half2 per pair, column = warp_id * 32 + lane_id + NUM_THREADS * i, `break` / `return` past dim / 2) in a
// float itemf[blocks_per_warp][2] register array between the two passes, fma() for the sum of squares, xor
// shuffles (offset from warpSize) then a __shared__ float sums[NUM_WARPS] read back by every warp (sum =
// sums[lane_id]) and shuffled again; blocks_per_warp = DIVIDE(dim, NUM_THREADS * 2) picked at run time through a
// kernel_instance(bpw) macro chain returning a function pointer (fp_rms_norm_kernel typedef) that the launcher
// then launches (spec = <2>: rows of 2049..4096). The CUDA-graph label argument of rms_norm_cuda is dropped.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

#define DIVIDE(x, size) (((x) + (size) - 1) / (size))

#define NUM_WARPS 32
#define WARP_SIZE 32

// y = x * w / sqrt(row_mean(x * x) + epsilon)

#define BLOCK_SIZE WARP_SIZE
#define NUM_THREADS (NUM_WARPS * WARP_SIZE)

typedef void (*fp_rms_norm_kernel)(const void*, const half*, void*, const float, const float, const int, const int,
                                   const bool, const bool, const bool);

/* kerntune:
args  = ["x: in f32[rows * dim]", "w: in f16[dim]", "y: out f16[rows * dim]", "epsilon: f32 = 1e-6",
         "r_dim: f32 = 1.0 / dim", "rows: i32 = rows", "dim: i32 = dim", "add_residual: u8 = 0",
         "input_fp32: u8 = 1", "output_fp32: u8 = 0"]
sizes = [{ rows = 8192, dim = 4096 }, { rows = 4, dim = 3584 }, { rows = 1001, dim = 3070 }]
grid  = "rows"
block = 1024
template_args = ["2"]
*/
template <int blocks_per_warp>
__global__ void rms_norm_kernel(const void* __restrict__ x, const half* __restrict__ w, void* __restrict__ y,
                                const float epsilon, const float r_dim, const int rows, const int dim,
                                const bool add_residual, const bool input_fp32, const bool output_fp32) {
  int warp_id = threadIdx.x / WARP_SIZE;
  int lane_id = threadIdx.x % WARP_SIZE;
  int row = blockIdx.x;
  const half2* w2 = (const half2*)w;

  // Sum of squares, the row kept in registers

  float sum = 0.0f;
  float itemf[blocks_per_warp][2];

  if (!input_fp32) {
    const half2* x_row = (const half2*)(((const half*)x) + row * dim);

#pragma unroll
    for (int i = 0; i < blocks_per_warp; i++) {
      int column = warp_id * WARP_SIZE + lane_id + NUM_THREADS * i;
      if (column >= dim / 2) break;

      half2 x2 = x_row[column];
      float f0 = __half2float(__low2half(x2));
      float f1 = __half2float(__high2half(x2));
      f0 = fmaxf(-65504.0f, fminf(f0, 65504.0f));
      f1 = fmaxf(-65504.0f, fminf(f1, 65504.0f));
      itemf[i][0] = f0;
      itemf[i][1] = f1;
      sum = fma(f0, f0, sum);
      sum = fma(f1, f1, sum);
    }
  } else {
    const float2* x_row = (const float2*)(((const float*)x) + row * dim);

#pragma unroll
    for (int i = 0; i < blocks_per_warp; i++) {
      int column = warp_id * WARP_SIZE + lane_id + NUM_THREADS * i;
      if (column >= dim / 2) break;

      float2 x2 = x_row[column];
      itemf[i][0] = x2.x;
      itemf[i][1] = x2.y;
      sum = fma(x2.x, x2.x, sum);
      sum = fma(x2.y, x2.y, sum);
    }
  }

  // Lanes of a warp, then the warps' partial sums (every warp re-reduces all of them)

  __shared__ float sums[NUM_WARPS];

  for (int offset = warpSize / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
  if (lane_id == 0) sums[warp_id] = sum;
  __syncthreads();

  sum = sums[lane_id];
  for (int offset = warpSize / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);

  float rmf = rsqrtf(sum * r_dim + epsilon);

  // Normalize, scale by w, store (or add into y)

  if (!output_fp32) {
    half2* y_row = (half2*)(((half*)y) + row * dim);

#pragma unroll
    for (int i = 0; i < blocks_per_warp; i++) {
      int column = warp_id * WARP_SIZE + lane_id + NUM_THREADS * i;
      if (column >= dim / 2) return;
      half2 w2_ = w2[column];

      float n0 = itemf[i][0] * __half2float(__low2half(w2_)) * rmf;
      float n1 = itemf[i][1] * __half2float(__high2half(w2_)) * rmf;
      half2 nh = __halves2half2(__float2half_rn(n0), __float2half_rn(n1));
      if (add_residual)
        y_row[column] = __hadd2(y_row[column], nh);
      else
        y_row[column] = nh;
    }
  } else {
    float2* y_row = (float2*)(((float*)y) + row * dim);

#pragma unroll
    for (int i = 0; i < blocks_per_warp; i++) {
      int column = warp_id * WARP_SIZE + lane_id + NUM_THREADS * i;
      if (column >= dim / 2) return;
      half2 w2_ = w2[column];

      float n0 = itemf[i][0] * __half2float(__low2half(w2_)) * rmf;
      float n1 = itemf[i][1] * __half2float(__high2half(w2_)) * rmf;
      if (add_residual) {
        float2 y2 = y_row[column];
        y2.x += n0;
        y2.y += n1;
        y_row[column] = y2;
      } else {
        y_row[column] = make_float2(n0, n1);
      }
    }
  }
}

#define kernel_instance(bpw) \
  if (blocks_per_warp == bpw) return rms_norm_kernel<bpw>

fp_rms_norm_kernel pick_rms_norm_kernel(const int blocks_per_warp) {
  kernel_instance(1);
  kernel_instance(2);
  kernel_instance(3);
  kernel_instance(4);
  kernel_instance(5);
  kernel_instance(6);
  kernel_instance(7);
  kernel_instance(8);
  return NULL;
}

// x: [rows, dim] float (input_fp32) or half; w: [dim] half; y: [rows, dim] half (or float with output_fp32);
// dim even and at most 8 * 2048; device pointers.
void rms_norm_cuda(cudaStream_t stream, const void* x, const half* w, void* y, const float epsilon, const int rows,
                   const int dim, const bool add_residual, const bool input_fp32, const bool output_fp32) {
  dim3 blockDim, gridDim;
  blockDim.x = NUM_THREADS;
  blockDim.y = 1;
  gridDim.x = rows;
  gridDim.y = 1;

  float r_dim = 1.0f / (float)dim;

  int blocks_per_warp = DIVIDE(dim, NUM_THREADS * 2);
  fp_rms_norm_kernel kernel = pick_rms_norm_kernel(blocks_per_warp);
  kernel<<<gridDim, blockDim, 0, stream>>>(x, w, y, epsilon, r_dim, rows, dim, add_residual, input_fp32,
                                           output_fp32);
}
