// Attention-score softmax (fp32) with a scale and an fp16 mask broadcast over heads, in the style of llama.cpp's
// ggml-cuda softmax.cu: row r of x uses mask row r % nrows_y, the block is the power of two covering the row
// (capped at 1024), the scaled and masked row is cached in dynamic shared memory after a 32-float inter-warp
// buffer, warp-shuffle reductions merged through that buffer.
// Tolerance: probabilities are ~1/ncols and far below, so atol is 1e-9 instead of the f32 default 1e-5.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

#define WARP_SIZE 32
#define CUDA_SOFT_MAX_BLOCK_SIZE 1024
#define GGML_PAD(x, n) (((x) + (n) - 1) & ~((n) - 1))

static __device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffff, x, offset, 32);
  return x;
}

static __device__ __forceinline__ float warp_reduce_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, offset, 32));
  return x;
}

/* kerntune:
args  = ["x: in f32[heads * q * kv]", "mask: in f16[q * kv]", "dst: out f32[heads * q * kv]", "ncols: i32 = kv",
         "nrows_y: i32 = q", "scale: f32 = 0.08838834764831845"]
sizes = [{ heads = 32, q = 512, kv = 4096 }, { heads = 32, q = 1, kv = 8192 }, { heads = 28, q = 37, kv = 4099 }]
grid  = "heads * q"
block = "1024 if kv > 512 else 512 if kv > 256 else 256 if kv > 128 else 128 if kv > 64 else 64 if kv > 32 else 32"
smem  = "(round_up(kv, 32) + 32) * 4"
atol  = 1e-9
*/
static __global__ void soft_max_f32(const float * x, const half * mask, float * dst, const int ncols,
                                    const int nrows_y, const float scale) {
  const int tid  = threadIdx.x;
  const int rowx = blockIdx.x;
  const int rowy = rowx % nrows_y; // broadcast the mask in the row dimension

  const int block_size = blockDim.x;
  const int warp_id = threadIdx.x / WARP_SIZE;
  const int lane_id = threadIdx.x % WARP_SIZE;

  extern __shared__ float data_soft_max_f32[];
  float * buf_iw = data_soft_max_f32;  // shared memory buffer for inter-warp communication
  float * vals = buf_iw + WARP_SIZE;   // the scaled and masked row

  float max_val = -INFINITY;
  for (int col = tid; col < ncols; col += block_size) {
    const int64_t ix = (int64_t)rowx*ncols + col;
    const int64_t iy = (int64_t)rowy*ncols + col;
    const float val = x[ix]*scale + (mask ? __half2float(mask[iy]) : 0.0f);
    vals[col] = val;
    max_val = fmaxf(max_val, val);
  }

  // find the max value in the block
  max_val = warp_reduce_max(max_val);
  if (block_size > WARP_SIZE) {
    if (warp_id == 0) {
      buf_iw[lane_id] = -INFINITY;
    }
    __syncthreads();
    if (lane_id == 0) {
      buf_iw[warp_id] = max_val;
    }
    __syncthreads();
    max_val = buf_iw[lane_id];
    max_val = warp_reduce_max(max_val);
  }

  float tmp = 0.0f; // partial sum
  for (int col = tid; col < ncols; col += block_size) {
    const float val = expf(vals[col] - max_val);
    tmp += val;
    vals[col] = val;
  }

  // find the sum of exps in the block
  tmp = warp_reduce_sum(tmp);
  if (block_size > WARP_SIZE) {
    __syncthreads(); // every warp has read the maximum before the buffer is reset
    if (warp_id == 0) {
      buf_iw[lane_id] = 0.0f;
    }
    __syncthreads();
    if (lane_id == 0) {
      buf_iw[warp_id] = tmp;
    }
    __syncthreads();
    tmp = buf_iw[lane_id];
    tmp = warp_reduce_sum(tmp);
  }

  const float inv_sum = 1.0f / tmp;
  for (int col = tid; col < ncols; col += block_size) {
    dst[(int64_t)rowx*ncols + col] = vals[col] * inv_sum;
  }
}

static void soft_max_f32_cuda(const float * x, const half * mask, float * dst, const int ncols_x,
                              const int nrows_x, const int nrows_y, const float scale, cudaStream_t stream) {
  int nth = WARP_SIZE;
  while (nth < ncols_x && nth < CUDA_SOFT_MAX_BLOCK_SIZE) nth *= 2;
  const dim3 block_dims(nth, 1, 1);
  const dim3 block_nums(nrows_x, 1, 1);
  const size_t nbytes_shared = (GGML_PAD(ncols_x, WARP_SIZE) + WARP_SIZE)*sizeof(float);
  soft_max_f32<<<block_nums, block_dims, nbytes_shared, stream>>>(x, mask, dst, ncols_x, nrows_y, scale);
}

// x, dst: [n_head, n_q, n_kv] contiguous; mask: [n_q, n_kv]
void ggml_cuda_op_soft_max_attn(const float * x, const half * mask, float * dst, int n_head, int n_q, int n_kv,
                                float scale, cudaStream_t stream) {
  soft_max_f32_cuda(x, mask, dst, n_kv, n_head * n_q, n_q, scale, stream);
}
