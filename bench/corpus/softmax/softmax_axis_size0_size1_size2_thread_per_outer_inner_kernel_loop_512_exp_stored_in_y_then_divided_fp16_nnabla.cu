// Softmax in the style of Sony's Neural Network Libraries CUDA extension (nnabla-ext-cuda,
// src/nbla/cuda/function/generic/softmax.cu: kernel_softmax_forward<T> behind SoftmaxCuda<T>::forward_impl, the
// F.softmax(x, axis) of nnabla graphs), written for the half type (nnabla's "cudnn:half" / mixed-precision context):
//   x, y [size0, size1, size2] (size1 is the softmax axis; size0 the product of the dims before it, size2 the
//   product of the dims after it), out of place
//   ONE THREAD PER (i0, i2) position: NBLA_CUDA_KERNEL_LOOP over size0 * size2 (int indices), three walks down
//   the axis with stride size2: the maximum (accumulated as float, CudaTypeForceFloat<half>, seeded with
//   -numeric_limits<T>::max()), then exp(x - max) WRITTEN TO y (rounded to half there) while the unrounded float
//   values are summed, then y = y / sum re-reading the half-rounded exponentials: two roundings per output
//   launch: NBLA_CUDA_LAUNCH_KERNEL_SIMPLE: NBLA_CUDA_NUM_THREADS = 512 threads, grid cuda_get_blocks_by_size
//   (ceil(n / 512), folded by ceil(blocks / NBLA_CUDA_MAX_BLOCKS = 65536) into an in-kernel loop); the element
//   count is the first kernel argument
// With axis = -1 (attention scores, size2 = 1) every thread walks its own row; with axis = 1 of an NCHW map
// (segmentation logits, size2 = H * W) neighbouring threads read neighbouring pixels. Sizes: 65536 rows of 512
// attention scores, 32 decode rows of 4097, and 3 x 21 classes x 12345 pixels. nnabla's HalfCuda struct is spelled
// __half here, the Variables / context plumbing is a plain launcher with a stream. No bug found.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>

namespace nbla {

#define NBLA_CEIL_INT_DIV(N, D) ((static_cast<int>(N) + static_cast<int>(D) - 1) / static_cast<int>(D))
#define NBLA_CUDA_NUM_THREADS 512
#define NBLA_CUDA_MAX_BLOCKS 65536
#define NBLA_CUDA_GET_BLOCKS(num) NBLA_CEIL_INT_DIV(num, NBLA_CUDA_NUM_THREADS)

#define NBLA_CUDA_KERNEL_LOOP(idx, num)                                                                        \
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < (num); idx += blockDim.x * gridDim.x)

inline int cuda_get_blocks_by_size(int size) {
  if (size == 0) return 0;
  const int blocks = NBLA_CUDA_GET_BLOCKS(size);
  const int inkernel_loop = NBLA_CEIL_INT_DIV(blocks, NBLA_CUDA_MAX_BLOCKS);
  const int total_blocks = NBLA_CEIL_INT_DIV(blocks, inkernel_loop);
  return total_blocks;
}

#define NBLA_CUDA_LAUNCH_KERNEL_IN_STREAM(kernel, stream, size, ...)                                          \
  {                                                                                                            \
    (kernel)<<<cuda_get_blocks_by_size(size), NBLA_CUDA_NUM_THREADS, 0, (stream)>>>((size), __VA_ARGS__);     \
  }

template <typename T> struct CudaTypeForceFloat { typedef T type; };
template <> struct CudaTypeForceFloat<__half> { typedef float type; };

template <typename T> struct numeric_limits_cuda;
template <> struct numeric_limits_cuda<__half> {
  __device__ static float max() { return 65504.f; }
};
template <> struct numeric_limits_cuda<float> {
  __device__ static float max() { return FLT_MAX; }
};

// The outputs are probabilities of about 1 / size1, far below the default fp16 absolute tolerance (1e-2), which
// would pass anything; atol 1e-6 keeps the relative tolerance in charge.
/* kerntune:
args  = ["size0x2_: i32 = size0 * size2", "size1_: i32 = size1", "size2_: i32 = size2",
         "x: in f16[size0 * size1 * size2]", "y: out f16[size0 * size1 * size2]"]
sizes = [{ size0 = 65536, size1 = 512, size2 = 1 }, { size0 = 32, size1 = 4097, size2 = 1 },
         { size0 = 3, size1 = 21, size2 = 12345 }]
grid  = "cdiv(cdiv(size0 * size2, 512), cdiv(cdiv(size0 * size2, 512), 65536))"
block = 512
atol  = 1e-6
template_args = ["__half"]
*/
template <typename T>
__global__ void kernel_softmax_forward(const int size0x2_, const int size1_, const int size2_, const T *x, T *y) {
  typedef typename CudaTypeForceFloat<T>::type AccumType;
  NBLA_CUDA_KERNEL_LOOP(idx, size0x2_) {
    const int i0 = idx / size2_;
    const int i2 = idx % size2_;
    // compute maximum
    AccumType max_x = -numeric_limits_cuda<T>::max();
    for (int i1 = 0; i1 < size1_; ++i1) {
      const int k = (i0 * size1_ + i1) * size2_ + i2;
      max_x = max(max_x, (AccumType)x[k]);
    }
    // exponentials: stored in y (rounded to T), summed unrounded
    AccumType exp_sum = 0;
    for (int i1 = 0; i1 < size1_; ++i1) {
      const int k = (i0 * size1_ + i1) * size2_ + i2;
      const AccumType tmp = exp((AccumType)x[k] - max_x);
      y[k] = (T)tmp;
      exp_sum += tmp;
    }
    // normalize what was stored
    for (int i1 = 0; i1 < size1_; ++i1) {
      const int k = (i0 * size1_ + i1) * size2_ + i2;
      y[k] = (T)((AccumType)y[k] / exp_sum);
    }
  }
}

// x, y: device [size0, size1, size2] half; the softmax runs along size1.
void softmax_forward_half(const __half *x, __half *y, int size0, int size1, int size2, cudaStream_t stream) {
  NBLA_CUDA_LAUNCH_KERNEL_IN_STREAM(kernel_softmax_forward<__half>, stream, size0 * size2, size1, size2, x, y);
}

}  // namespace nbla
