// GLU in the style of Caffe2 (caffe2/operators/glu_op.cu: glu_kernel behind GluOp<float, CUDAContext>::ComputeGlu,
// the gated linear unit of ConvS2S-style convolutional sequence models and GLU MLPs), float:
//   X is viewed as [M, 2 * split_dim_size, N] around the split axis (M = product of the dims before it,
//   N = product of the dims after it; N = 1 when the split is the last axis): the FIRST half x1 is the linear
//   part, the SECOND half x2 the gate; Y [M, split_dim_size, N] = x1 * sigmoid(x2)
//   argument order M, split_dim_size, N, Xdata, Ydata; int sizes and indices
//   one output element per iteration of CUDA_1D_KERNEL_LOOP (a grid-stride loop over the element count, the
//   product written in the macro's argument as Caffe2 does), the flat index decomposed into (i, j, k) by division and modulo
//   sigmoid written as 1. / (1. + exp(-x2)): exp of a float in single precision, then the DOUBLE literals make
//   the sum, the reciprocal and the product with x1 double-precision arithmetic, rounded to float at the store
//   launched with CAFFE_GET_BLOCKS(M * split_dim_size * N) blocks (capped at CAFFE_MAXIMUM_NUM_BLOCKS = 4096,
//   the loop covers the rest) of CAFFE_CUDA_NUM_THREADS = 128 threads on the operator's stream
// No bug found. Sizes: a last-axis GLU MLP (N = 1) at prefill and decode, and a ConvS2S-like channel GLU over
// [3, 2 * 257, 1001] (inner N = 1001).
#include <cuda_runtime.h>

#include <algorithm>

#define CUDA_1D_KERNEL_LOOP(i, n) \
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)

namespace caffe2 {

constexpr int CAFFE_CUDA_NUM_THREADS = 128;
constexpr int CAFFE_MAXIMUM_NUM_BLOCKS = 4096;

inline int CAFFE_GET_BLOCKS(const int N) {
  return std::max(
      std::min((N + CAFFE_CUDA_NUM_THREADS - 1) / CAFFE_CUDA_NUM_THREADS, CAFFE_MAXIMUM_NUM_BLOCKS),
      // Use at least 1 block, since CUDA does not allow empty block
      1);
}

namespace {
/* kerntune:
args  = ["M: i32 = M", "split_dim_size: i32 = split", "N: i32 = N", "Xdata: in f32[M * 2 * split * N]",
         "Ydata: out f32[M * split * N]"]
sizes = [{ M = 2048, split = 11008, N = 1 }, { M = 4, split = 11008, N = 1 }, { M = 3, split = 257, N = 1001 }]
grid  = "max(min(cdiv(M * split * N, 128), 4096), 1)"
block = 128
*/
__global__ void glu_kernel(
    const int M,
    const int split_dim_size,
    const int N,
    const float* Xdata,
    float* Ydata) {
  const int xOffset = 2 * split_dim_size * N;
  const int yOffset = split_dim_size * N;
  CUDA_1D_KERNEL_LOOP(index, M * split_dim_size * N) {
    const int i = index / split_dim_size / N;
    const int j = index / N % split_dim_size;
    const int k = index % N;
    const float x1 = Xdata[i * xOffset + j * N + k];
    const float x2 = Xdata[i * xOffset + (j + split_dim_size) * N + k];
    Ydata[i * yOffset + j * N + k] = x1 * (1. / (1. + exp(-x2)));
  }
}
} // namespace

// GluOp<float, CUDAContext>::ComputeGlu: Xdata, Ydata device buffers; stream = context_.cuda_stream().
void ComputeGlu(
    const int M,
    const int split_dim_size,
    const int N,
    const float* x_data,
    float* y_data,
    cudaStream_t stream) {
  glu_kernel<<<
      CAFFE_GET_BLOCKS(M * split_dim_size * N),
      CAFFE_CUDA_NUM_THREADS,
      0,
      stream>>>(M, split_dim_size, N, x_data, y_data);
}

} // namespace caffe2
