// Row softmax as the Marian NMT toolkit writes it (src/tensors/gpu/tensor_operators.cu, gSoftmax<half, float>
// behind Softmax, its fp16 build), over the last axis of [rows, cols]:
//   max = tree max over the row IN HALF (the shared scratch holds T for the max, seeded with -CUDA_FLT_MAX, which
//         is -inf in half)
//   ex  = Ops<half>::exp(x - max) = hexp(half(x - max))        the subtraction AND the exponential in half
//   out = ex (stored, then re-read)      sum += float(ex)      out = half(float(out) / sum)
// Marian's conventions: `for (int bid = 0; bid < rows; bid += gridDim.x) { int j = bid + blockIdx.x; if (j < rows)
// ... }` over blocks of rows with grid = min(MAX_BLOCKS = 65535, rows), block = min(MAX_THREADS = 512, cols), one
// float of dynamic shared memory per thread (extern __shared__ uint8_t _sharedBytes[] seen as T for the max and as
// AccType for the sum), columns strided by blockDim.x behind `if (i < cols)`, reductions by a shared tree valid for
// any block size (skip = (len + 1) >> 1, a __syncthreads() at the top of each step), the exponentials written to
// the output and divided in place in a third pass; CUDA_FLT_MAX a #define carrying its own trailing `;`; the
// functional::Shape argument (Marian passes the output's shape and derives rows = elements / back(), cols = back()
// in the kernel) is unpacked into int rows, int cols in its place, since a by-value struct has no spec form;
// default stream, cudaSetDevice dropped.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <algorithm>

#define CUDA_FLT_MAX 1.70141e+38;  // note: #define rather than a __constant__, as Marian has it

namespace marian {

namespace functional {
template <typename T>
struct Ops;

template <>
struct Ops<float> {
  static __host__ __device__ __forceinline__ float exp(const float& x) { return expf(x); }
};

template <>
struct Ops<half> {
  static __device__ __forceinline__ half exp(const half& x) { return hexp(x); }
};
}  // namespace functional

namespace gpu {

const int MAX_THREADS = 512;
const int MAX_BLOCKS = 65535;

// Probabilities of ~1 / cols (3e-5 for the vocabulary row): an absolute tolerance far below them.
/* kerntune:
args  = ["out: out f16[rows * cols]", "rows: i32 = rows", "cols: i32 = cols", "in: in f16[rows * cols]"]
sizes = [{ rows = 32768, cols = 2048 }, { rows = 4, cols = 32000 }, { rows = 70001, cols = 999 }]
grid  = "min(65535, rows)"
block = "min(512, cols)"
smem  = "4 * min(512, cols)"
atol  = 1e-6
template_args = ["half", "float"]
*/
template <typename T, typename AccType = float>
__global__ void gSoftmax(T* out, int rows, int cols, const T* in) {
  using namespace functional;

  for (int bid = 0; bid < rows; bid += gridDim.x) {  // loop over blocks of rows
    int j = bid + blockIdx.x;                          // blockIdx.x - row index (within block of rows)
    if (j < rows) {
      T* so = out + j * cols;
      const T* sp = in + j * cols;

      // keep the shared size constant across types
      extern __shared__ uint8_t _sharedBytes[];
      T* _share = (T*)_sharedBytes;
      AccType* _shareAccType = (AccType*)_sharedBytes;

      // max, in T
      T* _max = _share;
      _max[threadIdx.x] = -CUDA_FLT_MAX;
      for (int tid = 0; tid < cols; tid += blockDim.x) {
        int i = tid + threadIdx.x;
        if (i < cols) {
          if (sp[i] > _max[threadIdx.x]) _max[threadIdx.x] = sp[i];
        }
      }
      __syncthreads();
      int len = blockDim.x;
      while (len != 1) {
        __syncthreads();
        int skip = (len + 1) >> 1;
        if (threadIdx.x < (len >> 1)) {
          if (_max[threadIdx.x + skip] > _max[threadIdx.x]) {
            _max[threadIdx.x] = _max[threadIdx.x + skip];
          }
        }
        len = (len + 1) >> 1;
      }
      __syncthreads();
      T max = _max[0];
      __syncthreads();

      // denominator, accumulated in AccType; the exponentials go to the output
      AccType* _sum = _shareAccType;
      _sum[threadIdx.x] = 0.0;
      for (int tid = 0; tid < cols; tid += blockDim.x) {
        int i = tid + threadIdx.x;
        if (i < cols) {
          T ex = Ops<T>::exp(sp[i] - max);
          so[i] = (T)ex;
          _sum[threadIdx.x] += (AccType)ex;
        }
      }
      __syncthreads();
      len = blockDim.x;
      while (len != 1) {
        __syncthreads();
        int skip = (len + 1) >> 1;
        if (threadIdx.x < (len >> 1)) _sum[threadIdx.x] += _sum[threadIdx.x + skip];
        len = (len + 1) >> 1;
      }
      __syncthreads();

      // normalize in place, divided as AccType
      AccType sum = _sum[0];
      for (int tid = 0; tid < cols; tid += blockDim.x) {
        int i = tid + threadIdx.x;
        if (i < cols) {
          so[i] = (T)((AccType)so[i] / sum);
        }
      }
    }
    __syncthreads();
  }
}

// out / in: [rows, cols] half; device pointers; the default stream.
void Softmax(half* out, const half* in, int rows, int cols) {
  int blocks = std::min(MAX_BLOCKS, (int)rows);
  int threads = std::min(MAX_THREADS, (int)cols);
  int shared = sizeof(float) * threads;  // accumulate into float

  gSoftmax<half, float><<<blocks, threads, shared>>>(out, rows, cols, in);
}

}  // namespace gpu
}  // namespace marian
