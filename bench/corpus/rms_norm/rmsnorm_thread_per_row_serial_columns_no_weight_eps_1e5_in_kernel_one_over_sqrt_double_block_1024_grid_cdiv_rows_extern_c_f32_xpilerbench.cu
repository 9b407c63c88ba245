// RMSNorm as the XpilerBench CUDA reference kernels write it (ShouyangDong/xpiler-eval, XpilerBench/CUDA/
// rmsnorm_<rows>_<cols>.cu: the CUDA side of the QiMeng-Xpiler transcompilation benchmark, plain kernels with an
// extern "C" host entry), fp32, NO weight: B = A / sqrt(mean(A^2) + eps) per row, argument order (A, B) then the
// sizes. ONE THREAD PER ROW: thread idx = blockIdx.x * blockDim.x + threadIdx.x walks its whole row serially twice
// (sum of squares, then the scaled store), so neighbouring threads touch addresses a row apart; eps = 1e-5f is a
// literal inside the kernel, mean = sum / cols, scale = 1.0 / sqrt(mean + eps) with a double 1.0 (the division in
// double, the result stored to float); block_size = 1024, num_blocks = ceil(rows / 1024), default stream.
// Changed: the benchmark bakes rows and cols into each file (rmsnorm_8192_4096.cu) and its host entry copies host
// arrays in and out with cudaMalloc / cudaMemcpy; here rows and cols are kernel arguments and the entry takes device
// pointers; the row offset idx * cols is formed in 64 bits. No bug found at the benchmark's sizes. Sizes: 8192 x 4096 (8 blocks), decode 4 x 4096 (one block, 4 live threads),
// 999 x 1001 (one block).
#include <cuda_runtime.h>
#include <math.h>

/* kerntune:
args  = ["A: in f32[rows * cols]", "B: out f32[rows * cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 4, cols = 4096 }, { rows = 999, cols = 1001 }]
grid  = "cdiv(rows, 1024)"
block = 1024
*/
__global__ void rmsnorm(float *A, float *B, int rows, int cols) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  float eps = 1e-5f;

  if (idx < rows) {
    const long long base = (long long)idx * cols;

    float sq_sum = 0.0;
    for (int j = 0; j < cols; j++) {
      float v = A[base + j];
      sq_sum += v * v;
    }

    float mean = sq_sum / cols;
    float scale = 1.0 / sqrt(mean + eps);

    for (int j = 0; j < cols; j++) {
      B[base + j] = A[base + j] * scale;
    }
  }
}

extern "C" void rmsnorm_kernel(float *d_A, float *d_B, int size_1, int size_2) {
  int block_size = 1024;
  int num_blocks = (size_1 + block_size - 1) / block_size;

  rmsnorm<<<num_blocks, block_size>>>(d_A, d_B, size_1, size_2);
}
