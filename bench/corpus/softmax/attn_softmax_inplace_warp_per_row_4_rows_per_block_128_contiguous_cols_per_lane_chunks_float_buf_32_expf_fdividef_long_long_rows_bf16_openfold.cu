// Attention softmax in place as OpenFold writes its CUDA extension (aqlaboratory/openfold,
// openfold/utils/kernel/csrc/softmax_cuda_kernel.cu attn_softmax_inplace_ launched by attn_softmax_inplace_forward_,
// used by the Evoformer's attention core on [*, heads, q, k] logits). T = bf16 (the extension's at::BFloat16 path;
// fp32 is the other instance), the logits overwritten by the probabilities (one inout pointer), argument order
// (input, rows, cols) with rows a long long and cols an int. One warp per row, 4 rows per block of 128 threads
// (warp = threadIdx.x / 32, lane = threadIdx.x % 32), grid ceil(rows / 4), default stream. Each lane owns a
// CONTIGUOUS run of cols_per_thread = ceil(cols / 32) columns (lane * cols_per_thread ...), the lane holding the
// tail gets the remainder and later lanes none; the run is read into a float buf[32] register array, max by an xor
// butterfly (all-reduce), buf[i] = __expf(buf[i] - max) summed by a second butterfly, stores
// __fdividef(buf[i], sum) cast back to T: one read and one write of the row, fp32 math, one rounding.
// Fixed: buf[32] holds at most 1024 columns and the original launcher never checks, so longer rows write past the
// register array; the launcher now rejects cols > 1024. The row index blockIdx.x * 4 + warp is formed in 32-bit
// unsigned arithmetic before the cast to long long; widened before the multiply. Sizes: MSA row attention
// 128 x 8 x 256 query rows of 256 keys (262144 x 256), 8 x 1024 (every lane 32 columns), 4999 x 777 (25 columns per
// lane, lane 31 holds 2). atol 1e-6: the probabilities are ~1 / cols.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <math_constants.h>
#include <cstdio>

__inline__ __device__ float WarpAllReduceMax(float val) {
  for (int lane_mask = 1; lane_mask < 32; lane_mask <<= 1) {
    val = fmaxf(val, __shfl_xor_sync(0xffffffff, val, lane_mask));
  }
  return val;  // every lane holds the row maximum
}

__inline__ __device__ float WarpAllReduceSum(float val) {
  for (int lane_mask = 1; lane_mask < 32; lane_mask <<= 1) {
    val += __shfl_xor_sync(0xffffffff, val, lane_mask);
  }
  return val;
}

/* kerntune:
args  = ["input: inout bf16[rows * cols]", "rows: i64 = rows", "cols: i32 = cols"]
sizes = [{ rows = 262144, cols = 256 }, { rows = 8, cols = 1024 }, { rows = 4999, cols = 777 }]
grid  = "cdiv(rows, 4)"
block = 128
atol  = 1e-6
template_args = ["__nv_bfloat16"]
*/
template <typename T>
__global__ void attn_softmax_inplace_(T* input, long long rows, int cols) {
  const int warp_in_block = threadIdx.x / 32;  // one of the block's 4 rows
  const int lane = threadIdx.x % 32;
  const long long row = (long long)blockIdx.x * 4 + warp_in_block;

  // lane l owns columns [l * chunk, l * chunk + n_mine): a contiguous run, the lane at the tail gets the remainder
  const int chunk = (cols + 31) / 32;
  const int tail_lane = cols / chunk;
  int n_mine = chunk;
  if (lane == tail_lane) {
    n_mine = cols - tail_lane * chunk;
  } else if (lane > tail_lane) {
    n_mine = 0;
  }

  if (row >= rows) return;  // the whole warp leaves together

  T* logits = input + row * cols + lane * chunk;
  float vals[32];

  float my_max = -CUDART_INF_F;
#pragma unroll
  for (int c = 0; c < n_mine; ++c) {
    vals[c] = static_cast<float>(logits[c]);
    my_max = fmaxf(my_max, vals[c]);
  }
  const float row_max = WarpAllReduceMax(my_max);

  float my_sum = 0.f;
#pragma unroll
  for (int c = 0; c < n_mine; ++c) {
    vals[c] = __expf(vals[c] - row_max);
    my_sum += vals[c];
  }
  const float row_sum = WarpAllReduceSum(my_sum);

#pragma unroll
  for (int c = 0; c < n_mine; ++c) {
    logits[c] = static_cast<T>(__fdividef(vals[c], row_sum));  // probabilities overwrite the logits
  }
}

// attn_softmax_inplace_forward_ without the torch plumbing: input [rows, cols] on the device, overwritten in place.
int attn_softmax_inplace_forward_(__nv_bfloat16* input, long long rows, int cols) {
  if (cols > 32 * 32) {
    fprintf(stderr, "attn_softmax_inplace: cols = %d exceeds the 1024 columns a warp holds\n", cols);
    return -1;
  }
  int grid = (rows + 3) / 4;
  dim3 block(128);

  attn_softmax_inplace_<__nv_bfloat16><<<grid, block>>>(input, rows, cols);
  return 0;
}
