// LayerNorm for the short rows of encoder models (BERT / ViT / CLIP hidden sizes 768 or 1024), in the style of
// OneFlow's warp LayerNorm: a thread group of 16 lanes per row (half a warp), the row cached in registers
// (kColsPerLane columns per lane, column = i * 16 + lane, masked past cols), the mean and then the centered
// variance computed from the registers (an exact two-pass variance, one read of global memory), each reduced by
// xor shuffles of width 16. 8 rows per block of 128 threads; a grid-stride loop over row groups with the grid
// capped at 2048 blocks. The loop is uniform over the block (every thread runs every iteration, rows past the end
// only skip their loads and stores), so the shuffles always see both half-warps. Sizes first in the arguments,
// fp16 in and out with fp16 gamma and beta, fp32 math and one rounding:
//   y = half((x - mean) * rsqrt(var + epsilon) * gamma + beta)
// The host picks kColsPerLane from cols (16, 32 or 64: rows up to 1024 columns).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cassert>
#include <cstdint>

namespace layer_norm {

constexpr int kGroupWidth = 16;                          // lanes per row
constexpr int kBlockSize = 128;
constexpr int kRowsPerBlock = kBlockSize / kGroupWidth;  // 8
constexpr int kMaxBlocks = 2048;

__device__ __forceinline__ float GroupAllReduceSum(float v) {
#pragma unroll
  for (int mask = kGroupWidth / 2; mask > 0; mask /= 2) v += __shfl_xor_sync(0xffffffffu, v, mask, kGroupWidth);
  return v;
}

/* kerntune:
args  = ["rows: i64 = rows", "cols: i64 = cols", "epsilon: f32 = 1e-12", "x: in f16[rows * cols]",
         "y: out f16[rows * cols]", "gamma: in f16[cols]", "beta: in f16[cols]"]
sizes = [{ rows = 65536, cols = 768 }, { rows = 16, cols = 1024 }, { rows = 1001, cols = 771 }]
grid  = "min(cdiv(rows, 8), 2048)"
block = 128
template_args = ["64"]
*/
template <int kColsPerLane>
__global__ void LayerNormHalfWarpKernel(const int64_t rows, const int64_t cols, const float epsilon,
                                        const half* __restrict__ x, half* __restrict__ y,
                                        const half* __restrict__ gamma, const half* __restrict__ beta) {
  const int lane = threadIdx.x % kGroupWidth;
  const int local_row = threadIdx.x / kGroupWidth;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;

  for (int64_t block_row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; block_row < rows; block_row += step) {
    const int64_t row = block_row + local_row;
    const bool row_valid = row < rows;
    const half* x_row = x + row * cols;
    half* y_row = y + row * cols;

    float buf[kColsPerLane];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) {
      const int col = i * kGroupWidth + lane;
      buf[i] = (row_valid && col < cols) ? __half2float(x_row[col]) : 0.0f;
      sum += buf[i];
    }
    const float mean = GroupAllReduceSum(sum) / static_cast<float>(cols);

    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < kColsPerLane; ++i) {
      const int col = i * kGroupWidth + lane;
      if (col < cols) {
        const float d = buf[i] - mean;
        sq += d * d;
      }
    }
    const float var = GroupAllReduceSum(sq) / static_cast<float>(cols);
    const float inv_std = rsqrtf(var + epsilon);

    if (row_valid) {
#pragma unroll
      for (int i = 0; i < kColsPerLane; ++i) {
        const int col = i * kGroupWidth + lane;
        if (col < cols) {
          const float n = (buf[i] - mean) * inv_std;
          y_row[col] = __float2half(n * __half2float(gamma[col]) + __half2float(beta[col]));
        }
      }
    }
  }
}

}  // namespace layer_norm

// x, y: [rows, cols] fp16; gamma, beta: [cols] fp16. Device pointers; cols <= 1024.
void LayerNormForward(int64_t rows, int64_t cols, float epsilon, const half* x, half* y, const half* gamma,
                      const half* beta, cudaStream_t stream) {
  using namespace layer_norm;
  assert(cols <= 64 * kGroupWidth && "LayerNormForward: rows longer than 1024 columns take the block path");
  if (rows == 0 || cols == 0) return;
  const int64_t blocks_needed = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int grid = static_cast<int>(std::min<int64_t>(blocks_needed, kMaxBlocks));
  if (cols <= 16 * kGroupWidth) {
    LayerNormHalfWarpKernel<16><<<grid, kBlockSize, 0, stream>>>(rows, cols, epsilon, x, y, gamma, beta);
  } else if (cols <= 32 * kGroupWidth) {
    LayerNormHalfWarpKernel<32><<<grid, kBlockSize, 0, stream>>>(rows, cols, epsilon, x, y, gamma, beta);
  } else {
    LayerNormHalfWarpKernel<64><<<grid, kBlockSize, 0, stream>>>(rows, cols, epsilon, x, y, gamma, beta);
  }
}
