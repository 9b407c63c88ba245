// Log-sum-exp of each row of fp32 attention scores (the normalizer a split-KV attention merge or a log-softmax
// needs): a warp per row, WARPS_PER_BLOCK warps per block, the lane and warp taken from threadIdx.x by mask and
// shift, one pass with a running maximum and a rescaled running sum, then the lanes' (max, sum) pairs merged by
// warp shuffles. lse[row] = max + log(sum).
#include <cuda_runtime.h>
#include <cstdint>
#include <math.h>

constexpr int WARPS_PER_BLOCK = 8;
constexpr int kWarpSize = 32;

/* kerntune:
args  = ["lse: out f32[rows]", "scores: in f32[rows * cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 16384, cols = 2048 }, { rows = 7, cols = 4096 }, { rows = 999, cols = 1537 }]
grid  = "cdiv(rows, 8)"
block = "256"
*/
__global__ void row_logsumexp_kernel(float* __restrict__ lse, const float* __restrict__ scores, int rows,
                                     int cols) {
  const int lane = threadIdx.x & (kWarpSize - 1);
  const int warp = threadIdx.x >> 5;
  const int row = blockIdx.x * WARPS_PER_BLOCK + warp;
  if (row >= rows) return;
  const float* s = scores + (size_t)row * cols;

  float m = -INFINITY;
  float sum = 0.f;
  for (int i = lane; i < cols; i += kWarpSize) {
    const float v = s[i];
    if (v > m) {
      sum = sum * __expf(m - v) + 1.f;
      m = v;
    } else {
      sum += __expf(v - m);
    }
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float om = __shfl_xor_sync(0xffffffffu, m, offset);
    const float os = __shfl_xor_sync(0xffffffffu, sum, offset);
    const float nm = fmaxf(m, om);
    sum = (m == -INFINITY ? 0.f : sum * __expf(m - nm)) + (om == -INFINITY ? 0.f : os * __expf(om - nm));
    m = nm;
  }
  if (lane == 0) lse[row] = m + logf(sum);
}

void row_logsumexp(float* lse, const float* scores, int rows, int cols, cudaStream_t stream) {
  const int blocks = (rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
  row_logsumexp_kernel<<<blocks, WARPS_PER_BLOCK * kWarpSize, 0, stream>>>(lse, scores, rows, cols);
}
