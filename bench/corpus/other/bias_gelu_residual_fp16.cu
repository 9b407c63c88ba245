// FFN epilogue (fp16): out = gelu_erf(x + bias[col]) + residual, as a bias + activation + residual epilogue after
// a GEMM without a fused epilogue. One element per thread over a flat index, 256 threads per block.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* kerntune:
args  = ["out: out f16[rows * cols]", "x: in f16[rows * cols]", "bias: in f16[cols]", "residual: in f16[rows * cols]",
         "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 32, cols = 14336 }, { rows = 1000, cols = 4099 }]
grid  = "cdiv(rows * cols, 256)"
block = "256"
*/
__global__ void bias_gelu_residual_kernel(__half* out, const __half* x, const __half* bias, const __half* residual,
                                          int rows, int cols) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)rows * cols) return;
  const int col = (int)(i % cols);
  const float v = __half2float(x[i]) + __half2float(bias[col]);
  const float g = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
  out[i] = __float2half(g + __half2float(residual[i]));
}

void bias_gelu_residual(__half* out, const __half* x, const __half* bias, const __half* residual, int rows, int cols,
                        cudaStream_t stream) {
  const long long n = (long long)rows * cols;
  bias_gelu_residual_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(out, x, bias, residual, rows, cols);
}
