// Row softmax in the style of Kaldi's cudamatrix (src/cudamatrix/cu-kernels.cu: _softmax_reduce<Real> behind the
// ANSI-C wrapper cudaF_softmax_reduce, called by CuMatrixBase<float>::SoftMaxPerRow for the output layer of an
// acoustic model or any per-row softmax), f32:
//   y [rows, cols] row stride d.stride, x [rows, cols] row stride src_stride (Kaldi matrices are row-major with a
//   pitched stride; y and x may differ in stride); the spec's matrices are unpadded (strides = cols)
//   one block per row, CU1DBLOCK = 256 threads: each thread strides over the row by CU1DBLOCK for its max, then a
//   shared-memory tree down to 2 * warpSize values (__syncthreads per step) and a last step of the first warp
//   (shift from warpSize down to 1); the max broadcast through smem[0]; then the same for sum(exp(x - max)); the
//   output is exp(x - max) * (1 / sum), x read from global memory three times, exp() recomputed in the last pass
//   MatrixDim { rows, cols, stride } passed by value in Kaldi; here its three fields are passed as int arguments
//   (the spec reads scalar arguments), the launcher still builds a MatrixDim; default stream, grid = rows
// Fixed: Kaldi's last-warp step reads and writes smem with no volatile and no warp synchronisation ("threads
// implicitly synchronized within a warp"), a race under independent thread scheduling (Volta and later); each step
// now reads, __syncwarp(), writes, __syncwarp(). Kaldi also had every thread read the max from smem[0] and then
// write its partial sum into smem[tid] with no barrier between, so thread 0 could overwrite smem[0] before a slower
// warp read the max; a __syncthreads() now separates them.
// Tolerance: probabilities of rows of 6007-32000 values are far below the default absolute tolerance; atol is 1e-6.
#include <cuda_runtime.h>
#include <math_constants.h>
#include <stdint.h>

#define CU1DBLOCK 256

typedef int32_t int32_cuda;

struct MatrixDim {
  int32_cuda rows;
  int32_cuda cols;
  int32_cuda stride;
};

/* kerntune:
args  = ["y: out f32[rows * cols]", "x: in f32[rows * cols]", "d_rows: i32 = rows", "d_cols: i32 = cols",
         "d_stride: i32 = cols", "src_stride: i32 = cols"]
sizes = [{ rows = 1024, cols = 32000 }, { rows = 4, cols = 32000 }, { rows = 333, cols = 6007 }]
grid  = "rows"
block = 256
atol  = 1e-6
template_args = ["float"]
*/
template<typename Real>
__global__
static void _softmax_reduce(Real* y, const Real* x, int32_cuda d_rows, int32_cuda d_cols, int32_cuda d_stride,
                            int src_stride) {
  __shared__ Real smem[CU1DBLOCK];
  const int i = blockIdx.x;
  const int x_start = i * src_stride;
  const int y_start = i * d_stride;
  const int tid = threadIdx.x;

  // the max of the row: first CU1DBLOCK partial maxima
  Real tmax = sizeof(Real) == sizeof(float) ? -CUDART_INF_F : -CUDART_INF;
  for (int j = tid; j < d_cols; j += CU1DBLOCK) {
    tmax = fmax(tmax, x[x_start + j]);
  }
  smem[tid] = tmax;
  __syncthreads();

  // tree down to 2 * warpSize values
# pragma unroll
  for (int shift = CU1DBLOCK / 2; shift > warpSize; shift >>= 1) {
    if (tid < shift) {
      smem[tid] = fmax(smem[tid], smem[tid + shift]);
    }
    __syncthreads();
  }

  // the first warp finishes (synchronised per step)
  if (tid < warpSize) {
#   pragma unroll
    for (int shift = warpSize; shift > 0; shift >>= 1) {
      Real v = fmax(smem[tid], smem[tid + shift]);
      __syncwarp();
      smem[tid] = v;
      __syncwarp();
    }
  }

  // broadcast the max
  __syncthreads();
  Real max = smem[0];
  __syncthreads();  // smem is reused below

  // sum_j exp(x(i, j) - max)
  Real tsum = Real(0);
  for (int j = tid; j < d_cols; j += CU1DBLOCK) {
    tsum += exp(x[x_start + j] - max);
  }
  smem[tid] = tsum;
  __syncthreads();

# pragma unroll
  for (int shift = CU1DBLOCK / 2; shift > warpSize; shift >>= 1) {
    if (tid < shift) {
      smem[tid] += smem[tid + shift];
    }
    __syncthreads();
  }

  if (tid < warpSize) {
#   pragma unroll
    for (int shift = warpSize; shift > 0; shift >>= 1) {
      Real v = smem[tid] + smem[tid + shift];
      __syncwarp();
      smem[tid] = v;
      __syncwarp();
    }
  }

  // broadcast the sum
  __syncthreads();
  Real inv_sum = Real(1) / smem[0];

  // normalize the row
  for (int j = tid; j < d_cols; j += CU1DBLOCK) {
    y[y_start + j] = exp(x[x_start + j] - max) * inv_sum;
  }
}

// The ANSI-C wrapper (cu-kernels.cu) and the CuMatrix call site (cu-matrix.cc, SoftMaxPerRow): one block per row.
void cudaF_softmax_reduce(size_t Gr, size_t Bl, float* y, const float* x, MatrixDim d, int src_stride) {
  _softmax_reduce<<<Gr, Bl>>>(y, x, d.rows, d.cols, d.stride, src_stride);
}

// y, x: device matrices of num_rows rows of num_cols floats, row strides y_stride and x_stride.
void SoftMaxPerRow(float* y, const float* x, int num_rows, int num_cols, int y_stride, int x_stride) {
  MatrixDim d = {num_rows, num_cols, y_stride};
  size_t dimBlock = CU1DBLOCK;
  size_t dimGrid = num_rows;
  cudaF_softmax_reduce(dimGrid, dimBlock, y, x, d, x_stride);
}
