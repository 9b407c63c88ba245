// Per-row dot product of two bf16 matrices [rows, dim] in fp32 (a router logit against one expert vector per
// token, or the numerator of a cosine similarity): a 2-D block of kThreadsX threads along the row by kRows rows,
// each row's threads stride over it, the partial sums reduced by warp shuffles, then the row's warps through
// shared memory. out[row] = sum_c a[row, c] * b[row, c].
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace rowdot {

constexpr int kThreadsX = 64;
constexpr int kRows = 4;

/* kerntune:
args  = ["out: out f32[rows]", "a: in bf16[rows * dim]", "b: in bf16[rows * dim]", "rows: i32 = rows",
         "dim: i32 = dim"]
sizes = [{ rows = 16384, dim = 2048 }, { rows = 5, dim = 4096 }, { rows = 1001, dim = 2049 }]
grid  = "cdiv(rows, 4)"
block = [64, 4]
*/
__global__ void row_dot_kernel(float* __restrict__ out, const __nv_bfloat16* __restrict__ a,
                               const __nv_bfloat16* __restrict__ b, int rows, int dim) {
  __shared__ float partial[kRows][kThreadsX / 32];
  const int row = blockIdx.x * kRows + threadIdx.y;
  float acc = 0.f;
  if (row < rows) {
    const __nv_bfloat16* ar = a + (int64_t)row * dim;
    const __nv_bfloat16* br = b + (int64_t)row * dim;
    for (int c = threadIdx.x; c < dim; c += kThreadsX) acc += __bfloat162float(ar[c]) * __bfloat162float(br[c]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.y][threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0 && row < rows) {
    float total = 0.f;
    for (int w = 0; w < kThreadsX / 32; ++w) total += partial[threadIdx.y][w];
    out[row] = total;
  }
}

}  // namespace rowdot

void row_dot(float* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int rows, int dim, cudaStream_t stream) {
  const dim3 block(rowdot::kThreadsX, rowdot::kRows);
  const dim3 grid((rows + rowdot::kRows - 1) / rowdot::kRows);
  rowdot::row_dot_kernel<<<grid, block, 0, stream>>>(out, a, b, rows, dim);
}
