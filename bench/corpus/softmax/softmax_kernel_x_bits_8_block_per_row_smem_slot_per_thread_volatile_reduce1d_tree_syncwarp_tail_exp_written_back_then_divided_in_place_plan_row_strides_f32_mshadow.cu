// Row softmax in the style of mshadow (dmlc/mshadow, mshadow/cuda/tensor_gpu-inl.cuh: SoftmaxKernel behind
// mshadow::cuda::Softmax(dst, src), reached through mshadow::Softmax in tensor_gpu-inl.h; mshadow is the
// expression-template tensor library under MXNet and cxxnet, its reductions in mshadow/cuda/reduce.cuh):
//   dst, src: 2-D Tensor<gpu, 2, DType> [rows, xmax], each read through an expression PLAN: Eval(y, x) /
//   REval(y, x) = dptr_[y * stride_ + x] with the tensor's own row stride (mshadow pads GPU rows it allocates to a
//   multiple of 32 when they are at least 64 wide);
//   template <int x_bits, typename DType>: one block of 1 << x_bits threads per row (kBaseThreadBits = 8: 256
//   threads), grid = rows, refused above 65535 rows by CheckLaunchParam;
//   __shared__ DType s_rec[1 << x_bits], ONE SLOT PER THREAD: pass 1 keeps each thread's running max in its slot
//   (threads past xmax copy slot 0), Reduce1D<red::maximum, x_bits> reduces the slots in place (a volatile tree:
//   __syncthreads() between the steps down to 32, then the last warp with __syncwarp() between its steps), every
//   thread reads s_rec[0]; pass 2 zeroes the slots, each thread adds p = expf(x - max) into its slot AND WRITES p
//   INTO dst ("write back first, will fetch later"), Reduce1D<red::sum, x_bits>; pass 3 divides dst in place by the
//   sum (dst re-read); fp32, expf and IEEE division.
// Fixed: the plan's offsets y * stride_ + x are index_t (int32 unless MSHADOW_INT64_TENSOR_SIZE) products; past
// 2^31 elements (32768 rows x 65536 classes) they overflowed and the rows were read and written out of bounds:
// 64-bit here. (Old mshadow versions also ran the warp tail of Reduce1D without __syncwarp(), a race on Volta and
// later; the current code, followed here, has it.)
// Changed: the two Plan objects passed by value are unpacked into (pointer, row stride) kernel arguments and
// rebuilt in the kernel; CheckLaunchParam's LOG(FATAL) became an error message and an early return; the
// Tensor / Stream arguments became a C++ launcher with device pointers, sizes, row strides and a stream.
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <cuda_runtime.h>

namespace mshadow {

typedef int32_t index_t;

namespace red {
struct sum {
  template <typename DType>
  __device__ __forceinline__ static void Reduce(volatile DType& dst, volatile DType src) {
    dst += src;
  }
};
struct maximum {
  template <typename DType>
  __device__ __forceinline__ static void Reduce(volatile DType& dst, volatile DType src) {
    dst = ::max(dst, src);
  }
};
}  // namespace red

namespace expr {
// Plan of a 2-D tensor: element (y, x) at dptr_[y * stride_ + x]
template <typename DType>
class Plan {
 public:
  __device__ Plan(DType* dptr, index_t stride) : dptr_(dptr), stride_(stride) {}
  __device__ __forceinline__ DType& REval(index_t y, index_t x) {
    return dptr_[(int64_t)y * stride_ + x];  // 64-bit offset (fixed)
  }
  __device__ __forceinline__ const DType& Eval(index_t y, index_t x) const {
    return dptr_[(int64_t)y * stride_ + x];
  }

 private:
  DType* dptr_;
  index_t stride_;
};
}  // namespace expr

namespace cuda {

const int kMemUnitBits = 5;
const int kMaxThreadsPerBlock = 1024;
/*! \brief suggested thread number (log2) for mapping kernels */
const int kBaseThreadBits = 8;
const int kBaseThreadNum = 1 << kBaseThreadBits;
const int kMaxGridDim = 65535;

// in-place tree reduction of buf[0 .. 1 << x_bits) into buf[0]
template <typename Reducer, int x_bits, typename DType>
__device__ void ReduceX(volatile DType buf[], int tid) {
  if (x_bits >= 10) {
    if (tid < 512) Reducer::Reduce(buf[tid], buf[tid + 512]);
    __syncthreads();
  }
  if (x_bits >= 9) {
    if (tid < 256) Reducer::Reduce(buf[tid], buf[tid + 256]);
    __syncthreads();
  }
  if (x_bits >= 8) {
    if (tid < 128) Reducer::Reduce(buf[tid], buf[tid + 128]);
    __syncthreads();
  }
  if (x_bits >= 7) {
    if (tid < 64) Reducer::Reduce(buf[tid], buf[tid + 64]);
    __syncthreads();
  }
  if (x_bits >= 6) {
    if (tid < 32) Reducer::Reduce(buf[tid], buf[tid + 32]);
    __syncthreads();
  }
  // the last warp
  if (x_bits >= 5) {
    if (tid < 16) Reducer::Reduce(buf[tid], buf[tid + 16]);
    __syncwarp();
  }
  if (x_bits >= 4) {
    if (tid < 8) Reducer::Reduce(buf[tid], buf[tid + 8]);
    __syncwarp();
  }
  if (x_bits >= 3) {
    if (tid < 4) Reducer::Reduce(buf[tid], buf[tid + 4]);
    __syncwarp();
  }
  if (x_bits >= 2) {
    if (tid < 2) Reducer::Reduce(buf[tid], buf[tid + 2]);
    __syncwarp();
  }
  if (x_bits >= 1) {
    if (tid < 1) Reducer::Reduce(buf[tid], buf[tid + 1]);
    __syncwarp();
  }
}

template <typename Reducer, int x_bits, typename DType>
__device__ void Reduce1D(volatile DType buf[1 << x_bits]) {
  ReduceX<Reducer, x_bits>(buf, threadIdx.x);
}

inline bool CheckLaunchParam(dim3 dimGrid, dim3 dimBlock, const char* estr = "") {
  if (dimBlock.x * dimBlock.y * dimBlock.z > static_cast<unsigned>(kMaxThreadsPerBlock) || dimGrid.x > kMaxGridDim ||
      dimGrid.y > kMaxGridDim) {
    fprintf(stderr, "too large launch parameter: %s[%u,%u], [%u,%u,%u]\n", estr, dimGrid.x, dimGrid.y, dimBlock.x,
            dimBlock.y, dimBlock.z);
    return false;
  }
  return true;
}

// The probabilities are ~1 / xmax (3e-5 to 5e-4), far below the default absolute tolerance: a small atol.
/* kerntune:
args  = ["dst_dptr: out f32[R * C]", "dst_stride: i32 = C", "src_dptr: in f32[R * C]", "src_stride: i32 = C",
         "xmax: i32 = C"]
sizes = [{ R = 32768, C = 2048 }, { R = 32, C = 4097 }, { R = 999, C = 32003 }]
grid  = "R"
block = 256
atol  = 1e-8
template_args = ["8", "float"]
*/
template <int x_bits, typename DType>
__global__ void SoftmaxKernel(DType* dst_dptr, index_t dst_stride, const DType* src_dptr, index_t src_stride,
                              index_t xmax) {
  expr::Plan<DType> dst(dst_dptr, dst_stride);
  const expr::Plan<DType> src(const_cast<DType*>(src_dptr), src_stride);
  const unsigned x_size = 1 << x_bits;
  const int y = blockIdx.x;
  __shared__ DType s_rec[x_size];
  // step 1: the max, one running value per thread
  if (threadIdx.x < xmax) {
    s_rec[threadIdx.x] = src.Eval(y, threadIdx.x);
  }
  for (unsigned x = x_size; x < xmax; x += x_size) {
    if (x + threadIdx.x < xmax) {
      DType a = src.Eval(y, x + threadIdx.x);
      s_rec[threadIdx.x] = max(a, s_rec[threadIdx.x]);
    }
  }
  __syncthreads();
  if (threadIdx.x >= xmax) {
    s_rec[threadIdx.x] = s_rec[0];
  }
  __syncthreads();
  Reduce1D<red::maximum, x_bits>(s_rec);
  __syncthreads();
  DType smax = s_rec[0];
  __syncthreads();
  s_rec[threadIdx.x] = 0.0f;
  __syncthreads();

  // step 2: the normalizer; the exponentials are written to dst now and fetched again below
  for (unsigned x = 0; x < xmax; x += x_size) {
    if (x + threadIdx.x < xmax) {
      DType p = expf(src.Eval(y, x + threadIdx.x) - smax);
      s_rec[threadIdx.x] += p;
      dst.REval(y, x + threadIdx.x) = p;
    }
  }
  __syncthreads();
  Reduce1D<red::sum, x_bits>(s_rec);
  __syncthreads();
  DType ssum = s_rec[0];

  // step 3: normalize in place
  for (unsigned x = 0; x < xmax; x += x_size) {
    if (x + threadIdx.x < xmax) {
      dst.REval(y, x + threadIdx.x) /= ssum;
    }
  }
}

// dst, src: device [rows, cols] with row strides dst_stride, src_stride (elements).
template <typename DType>
inline void Softmax(DType* dst, index_t dst_stride, const DType* src, index_t src_stride, index_t rows, index_t cols,
                    cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  dim3 dimBlock(kBaseThreadNum);
  dim3 dimGrid(rows);
  if (!CheckLaunchParam(dimGrid, dimBlock, "Softmax")) return;
  SoftmaxKernel<kBaseThreadBits, DType><<<dimGrid, dimBlock, 0, stream>>>(dst, dst_stride, src, src_stride, cols);
}

template void Softmax<float>(float*, index_t, const float*, index_t, index_t, index_t, cudaStream_t);

}  // namespace cuda
}  // namespace mshadow
