// LayerNorm as the Marian NMT toolkit writes it (src/tensors/gpu/tensor_operators.cu, gLNormalization behind
// LayerNormalization), float32 (T = AccType = float):
//   mean  = sum(x) / N                 sigma = sqrt(sum((x - mean)^2) / N + eps)        exact two-pass variance
//   y     = gamma * ((x - mean) / sigma) + beta      DIVIDED by sigma (no rsqrt), gamma / beta nullable (1 / 0)
// Marian's conventions: `for (int bid = 0; bid < rows; bid += gridDim.x) { int j = bid + blockIdx.x; if (j < rows)
// ... }` over blocks of rows with grid = min(MAX_BLOCKS = 65535, rows), block = min(MAX_THREADS = 512, cols) and
// dynamic shared memory of one AccType per thread (extern __shared__ uint8_t _sharedBytes[] reinterpreted), every
// thread striding the columns as `for (tid = 0; tid < cols; tid += blockDim.x) { id = tid + threadIdx.x; if (id <
// cols) ... }`, each reduction a shared-memory tree that works for any block size (skip = (len + 1) >> 1, len =
// (len + 1) >> 1, a __syncthreads() at the top of every step), the same scratch reused for the sum and the squared
// deviations, the row read three times from global memory, AccType N = cols, eps a defaulted kernel argument
// (AccType eps = 1e-9; the caller passes the layer's); launched on the default stream (no stream argument), the
// Tensor arguments (data pointers and the shape's rows / cols) replaced by raw pointers and ints and the launcher's
// cudaSetDevice call dropped.
#include <cuda_runtime.h>
#include <cstdint>
#include <algorithm>

namespace marian {

namespace functional {
template <typename T>
struct Ops;

template <>
struct Ops<float> {
  static __host__ __device__ __forceinline__ float sqrt(const float& x) { return sqrtf(x); }
};
}  // namespace functional

namespace gpu {

const int MAX_THREADS = 512;
const int MAX_BLOCKS = 65535;

/* kerntune:
args  = ["out: out f32[rows * cols]", "in: in f32[rows * cols]", "gamma: in f32[cols]", "beta: in f32[cols]",
         "rows: i32 = rows", "cols: i32 = cols", "eps: f32 = 1e-6"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 8, cols = 1024 }, { rows = 70001, cols = 1023 }]
grid  = "min(65535, rows)"
block = "min(512, cols)"
smem  = "4 * min(512, cols)"
template_args = ["float", "float"]
*/
template <typename T, typename AccType = float>
__global__ void gLNormalization(T* out, const T* in, const T* gamma, const T* beta, int rows, int cols,
                                AccType eps = 1e-9) {
  extern __shared__ uint8_t _sharedBytes[];
  AccType* _shareAccType = (AccType*)_sharedBytes;

  AccType N = cols;

  for (int bid = 0; bid < rows; bid += gridDim.x) {
    int j = bid + blockIdx.x;
    if (j < rows) {
      T* yRow = out + j * cols;
      const T* xRow = in + j * cols;

      // mean
      AccType* _sum = _shareAccType;
      _sum[threadIdx.x] = (AccType)0.0f;
      for (int tid = 0; tid < cols; tid += blockDim.x) {
        int id = tid + threadIdx.x;
        if (id < cols) {
          _sum[threadIdx.x] += (AccType)xRow[id];
        }
      }
      __syncthreads();
      int len = blockDim.x;
      while (len != 1) {
        __syncthreads();
        int skip = (len + 1) >> 1;
        if (threadIdx.x < (len >> 1)) {
          _sum[threadIdx.x] += _sum[threadIdx.x + skip];
        }
        len = (len + 1) >> 1;
      }
      __syncthreads();
      AccType mean = _sum[0] / N;
      __syncthreads();

      // variance around the mean, the same scratch reused
      AccType* _sqSum = _shareAccType;
      _sqSum[threadIdx.x] = (AccType)0.0f;
      for (int tid = 0; tid < cols; tid += blockDim.x) {
        int id = tid + threadIdx.x;
        if (id < cols) {
          AccType xv = (AccType)xRow[id];
          AccType ex = xv - mean;
          _sqSum[threadIdx.x] += ex * ex;
        }
      }
      __syncthreads();
      len = blockDim.x;
      while (len != 1) {
        __syncthreads();
        int skip = (len + 1) >> 1;
        if (threadIdx.x < (len >> 1)) _sqSum[threadIdx.x] += _sqSum[threadIdx.x + skip];
        len = (len + 1) >> 1;
      }
      __syncthreads();
      AccType sigma = functional::Ops<AccType>::sqrt(_sqSum[0] / N + eps);
      __syncthreads();

      // normalize, scale, shift
      for (int tid = 0; tid < cols; tid += blockDim.x) {
        int id = tid + threadIdx.x;
        if (id < cols) {
          AccType gammav = gamma ? (AccType)gamma[id] : (AccType)1.f;
          AccType xv = (AccType)xRow[id];
          AccType betav = beta ? (AccType)beta[id] : (AccType)0.f;
          AccType lv = (xv - mean) / sigma;
          AccType y = gammav * lv + betav;
          yRow[id] = (T)y;
        }
      }
    }
    __syncthreads();
  }
}

// out / in: [rows, cols] float, gamma / beta: [cols] float or nullptr; device pointers; the default stream.
void LayerNormalization(float* out, const float* in, const float* gamma, const float* beta, int rows, int cols,
                        float eps) {
  int blocks = std::min(MAX_BLOCKS, (int)rows);
  int threads = std::min(MAX_THREADS, (int)cols);
  int shared = threads * sizeof(float);

  gLNormalization<float, float><<<blocks, threads, shared>>>(out, in, gamma, beta, rows, cols, eps);
}

}  // namespace gpu
}  // namespace marian
