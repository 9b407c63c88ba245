// In-place bias add (bf16) on a GEMM output with padded rows: y[r, c] += bias[c] for c < cols, the row stride ld
// (the GEMM's leading dimension, ld >= cols) distinct from cols so the padding columns are left untouched. A 2-D
// grid: blockIdx.y is the row, blockIdx.x * blockDim.x + threadIdx.x the column; a 64-bit index local built from
// the row stride; fp32 add, one rounding.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

constexpr int kThreads = 128;

/* kerntune:
args  = ["y: inout bf16[rows * ld]", "bias: in bf16[cols]", "cols: i32 = cols", "ld: i64 = ld"]
sizes = [{ rows = 8192, cols = 4096, ld = 4160 }, { rows = 8, cols = 11008, ld = 11072 },
         { rows = 999, cols = 4097, ld = 4104 }]
grid  = ["cdiv(cols, 128)", "rows"]
block = "128"
*/
__global__ void add_bias_padded_kernel(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ bias, int cols,
                                       int64_t ld) {
  const int row = blockIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const int64_t idx = (int64_t)row * ld + col;
  y[idx] = __float2bfloat16(__bfloat162float(y[idx]) + __bfloat162float(bias[col]));
}

void add_bias_padded(__nv_bfloat16* y, const __nv_bfloat16* bias, int rows, int cols, int64_t ld,
                     cudaStream_t stream) {
  const dim3 grid((cols + kThreads - 1) / kThreads, rows);
  add_bias_padded_kernel<<<grid, kThreads, 0, stream>>>(y, bias, cols, ld);
}
