// Dequantize int8 activations with one fp32 scale per row to fp16 (the inverse of a per-token int8 quantization):
// out[r][c] = half(q[r][c] * scale[r]). A 2-D grid: blockIdx.y is the row, blockIdx.x the 256-column tile, one
// element per thread, the launch written with dim3 variables.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["out: out f16[rows * cols]", "q: in i8[rows * cols] ~ randint(-127, 127)", "scale: in f32[rows] ~ uniform(0.001, 0.05)",
         "cols: i32 = cols"]
sizes = [{ rows = 8192, cols = 8192 }, { rows = 16, cols = 14336 }, { rows = 1001, cols = 4097 }]
grid  = ["cdiv(cols, 256)", "rows"]
block = "256"
*/
__global__ void dequant_rowscale_kernel(__half* __restrict__ out, const int8_t* __restrict__ q,
                                        const float* __restrict__ scale, int cols) {
  const int row = blockIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col < cols) {
    const size_t i = (size_t)row * cols + col;
    out[i] = __float2half((float)q[i] * scale[row]);
  }
}

void dequant_rowscale(__half* out, const int8_t* q, const float* scale, int rows, int cols, cudaStream_t stream) {
  dim3 block(256);
  dim3 grid((cols + 255) / 256, rows);
  dequant_rowscale_kernel<<<grid, block, 0, stream>>>(out, q, scale, cols);
}
