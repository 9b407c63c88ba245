// RMSNorm forward as a CUDA port of the one-program-per-row Triton kernels that serving and training code uses
// (the Triton tutorial's fused norm, the Liger / unsloth style RMSNorm): the whole row is one block of BLOCK_SIZE =
// next_power_of_2(n_cols) columns held in registers, loaded once with a mask (other = 0), the block's
// num_warps = min(max(BLOCK_SIZE / 256, 1), 8) as Triton's launcher picks it, and Triton's blocked layout: each
// thread holds runs of 4 contiguous columns, the runs of the block's threads side by side, repeated until
// BLOCK_SIZE is covered. x and y are addressed through row strides (x may be a view into a larger buffer).
//   var = sum(x * x) / n_cols,  rstd = 1 / sqrt(var + eps),  y = bf16(x * rstd * w)
// in fp32 (x and w converted on load), one rounding at the store. tl.sum is a xor butterfly in each warp and the
// warp sums through shared memory. The host rounds n_cols up to a power of two (at least 256, at most 16384) and
// instantiates the kernel for it; every BLOCK_SIZE from 2048 up runs 8 warps.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cassert>
#include <cstdint>

__host__ __device__ constexpr int rms_num_warps(int block_size) {
  return block_size / 256 < 1 ? 1 : (block_size / 256 > 8 ? 8 : block_size / 256);
}
constexpr int kSizePerThread = 4;  // contiguous columns per thread in one repetition of the layout

/* kerntune:
args  = ["x: in bf16[num_rows * n_cols]", "y: out bf16[num_rows * n_cols]", "w: in bf16[n_cols]",
         "stride_x_row: i64 = n_cols", "stride_y_row: i64 = n_cols", "N: i32 = n_cols", "eps: f32 = 1e-6"]
sizes = [{ num_rows = 4096, n_cols = 8192 }, { num_rows = 4, n_cols = 8192 }, { num_rows = 1001, n_cols = 5121 }]
grid  = "num_rows"
block = 256
template_args = ["8192"]
*/
template <int BLOCK_SIZE>
__global__ void rms_norm_fwd_kernel(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ y,
                                    const __nv_bfloat16* __restrict__ w, const int64_t stride_x_row,
                                    const int64_t stride_y_row, const int N, const float eps) {
  constexpr int kNumWarps = rms_num_warps(BLOCK_SIZE);
  constexpr int kThreads = kNumWarps * 32;
  constexpr int kReps = BLOCK_SIZE / (kThreads * kSizePerThread);
  static_assert(kReps >= 1, "BLOCK_SIZE must cover one repetition of the layout");

  const int64_t row = blockIdx.x;  // tl.program_id(0)
  const __nv_bfloat16* x_row = x + row * stride_x_row;
  __nv_bfloat16* y_row = y + row * stride_y_row;

  float xs[kReps][kSizePerThread];
  float sum_sq = 0.0f;
#pragma unroll
  for (int r = 0; r < kReps; ++r) {
#pragma unroll
    for (int v = 0; v < kSizePerThread; ++v) {
      const int col = (r * kThreads + static_cast<int>(threadIdx.x)) * kSizePerThread + v;
      const float xv = col < N ? __bfloat162float(x_row[col]) : 0.0f;  // mask, other = 0
      xs[r][v] = xv;
      sum_sq += xv * xv;
    }
  }

  // tl.sum(x * x, axis=0)
  __shared__ float warp_sums[kNumWarps];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum_sq;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kNumWarps; ++i) total += warp_sums[i];

  const float var = total / N;
  const float rstd = 1.0f / sqrtf(var + eps);

#pragma unroll
  for (int r = 0; r < kReps; ++r) {
#pragma unroll
    for (int v = 0; v < kSizePerThread; ++v) {
      const int col = (r * kThreads + static_cast<int>(threadIdx.x)) * kSizePerThread + v;
      if (col < N) y_row[col] = __float2bfloat16(xs[r][v] * rstd * __bfloat162float(w[col]));
    }
  }
}

template <int BLOCK_SIZE>
static void launch_rms_norm_fwd(const __nv_bfloat16* x, __nv_bfloat16* y, const __nv_bfloat16* w,
                                int64_t stride_x_row, int64_t stride_y_row, int num_rows, int n_cols, float eps,
                                cudaStream_t stream) {
  constexpr int num_warps = rms_num_warps(BLOCK_SIZE);
  rms_norm_fwd_kernel<BLOCK_SIZE><<<num_rows, num_warps * 32, 0, stream>>>(x, y, w, stride_x_row, stride_y_row,
                                                                           n_cols, eps);
}

// x: [num_rows, n_cols] with row stride stride_x_row; y: [num_rows, n_cols] with row stride stride_y_row; w: [n_cols].
// bf16, device pointers. A row must fit one block of at most 16384 columns.
void rms_norm_fwd(const __nv_bfloat16* x, __nv_bfloat16* y, const __nv_bfloat16* w, int64_t stride_x_row,
                  int64_t stride_y_row, int num_rows, int n_cols, float eps, cudaStream_t stream) {
  if (num_rows == 0 || n_cols == 0) return;
  int block_size = 256;
  while (block_size < n_cols) block_size *= 2;  // triton.next_power_of_2, at least 256
  switch (block_size) {
    case 256: launch_rms_norm_fwd<256>(x, y, w, stride_x_row, stride_y_row, num_rows, n_cols, eps, stream); break;
    case 512: launch_rms_norm_fwd<512>(x, y, w, stride_x_row, stride_y_row, num_rows, n_cols, eps, stream); break;
    case 1024: launch_rms_norm_fwd<1024>(x, y, w, stride_x_row, stride_y_row, num_rows, n_cols, eps, stream); break;
    case 2048: launch_rms_norm_fwd<2048>(x, y, w, stride_x_row, stride_y_row, num_rows, n_cols, eps, stream); break;
    case 4096: launch_rms_norm_fwd<4096>(x, y, w, stride_x_row, stride_y_row, num_rows, n_cols, eps, stream); break;
    case 8192: launch_rms_norm_fwd<8192>(x, y, w, stride_x_row, stride_y_row, num_rows, n_cols, eps, stream); break;
    case 16384:
      launch_rms_norm_fwd<16384>(x, y, w, stride_x_row, stride_y_row, num_rows, n_cols, eps, stream);
      break;
    default: assert(false && "rms_norm_fwd: a row of more than 16384 columns does not fit one block");
  }
}
