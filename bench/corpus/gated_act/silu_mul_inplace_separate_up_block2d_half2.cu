// SiLU-and-mul as ExLlamaV2's quantized MLP (q_mlp.cu) writes it: the gate and up projections are two separate
// GEMM outputs, x (gate) [height, width] and y (up) [height, width], and the activation is applied IN PLACE over
// x: x = silu(x) * y, so the down projection reads x next. Everything is in packed half arithmetic, two columns a
// thread as one half2: e = h2exp(-x), r = h2rcp(1 + e), silu = x * r, then * y; each step rounded to fp16.
// The launch is ExLlamaV2's: file-level constants THREADS_X = 32 and THREADS_Y = 4 as a 2-D block, a 2-D grid
// over (column pairs, rows) with its DIVIDE macro; width must be even.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define DIVIDE(x, size) (((x) + (size) - 1) / (size))

const int THREADS_X = 32;
const int THREADS_Y = 4;

__device__ __forceinline__ half2 silu(half2 x) {
  const half2 one = __float2half2_rn(1.0f);
  const half2 neg_x = __hneg2(x);
  const half2 e = h2exp(neg_x);
  const half2 sum = __hadd2(one, e);
  const half2 r = h2rcp(sum);
  return __hmul2(x, r);
}

// Default fp16 tolerance kept: the activation is computed in fp16 (three roundings before the multiply by y), so a
// rewrite in fp32 differs by a few fp16 ulps, well inside rtol 1e-2.
/* kerntune:
args  = ["x: inout f16[height * width]", "y: in f16[height * width]", "height: i32 = height", "width: i32 = width"]
sizes = [{ height = 4096, width = 14336 }, { height = 4, width = 14336 }, { height = 77, width = 2730 }]
grid  = ["cdiv(width / 2, 32)", "cdiv(height, 4)"]
block = [32, 4]
*/
__global__ void silu_mul_kernel(half* __restrict__ x, const half* __restrict__ y, const int height,
                                const int width) {
  const int column = (THREADS_X * blockIdx.x + threadIdx.x) * 2;
  const int row = THREADS_Y * blockIdx.y + threadIdx.y;
  if (column >= width || row >= height) return;

  half2* x_ptr = reinterpret_cast<half2*>(x + (size_t)row * width + column);
  const half2* y_ptr = reinterpret_cast<const half2*>(y + (size_t)row * width + column);
  const half2 x_item = *x_ptr;
  const half2 y_item = *y_ptr;
  *x_ptr = __hmul2(silu(x_item), y_item);
}

// Host side as the MLP forward calls it between its gate/up GEMMs and the down GEMM. Device pointers.
void silu_mul_cuda(half* x, const half* y, const int height, const int width, cudaStream_t stream) {
  dim3 blockDim, gridDim;
  blockDim.x = THREADS_X;
  blockDim.y = THREADS_Y;
  gridDim.x = DIVIDE(width / 2, THREADS_X);
  gridDim.y = DIVIDE(height, THREADS_Y);
  silu_mul_kernel<<<gridDim, blockDim, 0, stream>>>(x, y, height, width);
}
