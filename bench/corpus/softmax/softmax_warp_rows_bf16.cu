// Row softmax (bf16 in and out), one warp per row and 4 rows per block (block (32, ROWS_PER_BLOCK)), each lane
// keeping an online (max, sum) pair over its strided elements, the pairs merged with warp shuffles, then a second
// pass over the row writing exp(x - max) / sum. The row count is an argument.
// Tolerance: probabilities are ~1/cols, so the default bf16 atol of 1e-2 would accept any output; atol is 1e-6,
// rtol stays at the bf16 default (one bf16 rounding is 4e-3 relative).
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define ROWS_PER_BLOCK 4

/* kerntune:
args  = ["in: in bf16[rows * cols]", "out: out bf16[rows * cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 16384, cols = 4096 }, { rows = 64, cols = 8192 }, { rows = 1001, cols = 4097 }]
grid  = "cdiv(rows, 4)"
block = [32, 4]
atol  = 1e-6
*/
__global__ void softmax_warp_bf16(const __nv_bfloat16* __restrict__ in, __nv_bfloat16* __restrict__ out, int rows,
                                  int cols) {
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= rows) return;
  const __nv_bfloat16* x = in + (size_t)row * cols;
  __nv_bfloat16* y = out + (size_t)row * cols;

  float m = -INFINITY, s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) {
    const float v = __bfloat162float(x[c]);
    const float m_new = fmaxf(m, v);
    s = s * __expf(m - m_new) + __expf(v - m_new);
    m = m_new;
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float m_o = __shfl_xor_sync(0xffffffff, m, off);
    const float s_o = __shfl_xor_sync(0xffffffff, s, off);
    const float m_new = fmaxf(m, m_o);
    s = s * __expf(m - m_new) + s_o * __expf(m_o - m_new);
    m = m_new;
  }
  const float inv = 1.f / s;
  for (int c = threadIdx.x; c < cols; c += 32) {
    y[c] = __float2bfloat16(__expf(__bfloat162float(x[c]) - m) * inv);
  }
}

void softmax_bf16(const __nv_bfloat16* in, __nv_bfloat16* out, int rows, int cols, cudaStream_t stream) {
  dim3 block(32, ROWS_PER_BLOCK);
  dim3 grid((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
  softmax_warp_bf16<<<grid, block, 0, stream>>>(in, out, rows, cols);
}
