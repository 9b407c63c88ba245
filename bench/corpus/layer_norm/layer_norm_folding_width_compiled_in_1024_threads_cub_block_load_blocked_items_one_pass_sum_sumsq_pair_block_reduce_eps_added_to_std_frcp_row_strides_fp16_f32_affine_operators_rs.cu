// LayerNorm as operators-rs writes it (YdrMaster/operators-rs, operators/src/layer_norm/cuda/layer_norm.cuh
// folding, wrapped by the extern "C" layer_norm_{ta}_{tw}_folding_{threads}x{items} kernel that
// operators/src/layer_norm/cuda/mod.rs Scheme::new generates and compiles at run time for each (activation type,
// weight type, row length d), launched from Operator::launch; operators-rs is the Rust operator library of the
// InfiniLM Rust inference engine, whose GPT-2 models use this LayerNorm), fp16 activations, fp32 scale and bias:
//   y, x [n, d] fp16 with row strides (elements; the launcher passes the byte strides divided by the element size,
//   column strides must be the element size); s, b [d] fp32; argument order (y, stride_y, x, stride_x, s, b,
//   epsilon). THE ROW LENGTH IS NOT AN ARGUMENT: the generated wrapper passes d as a literal, one compiled kernel per
//   d (a template argument here, with the widths the launcher instantiates).
//   ONE PASS over the row for the statistics: each thread sums x and x * x over its items, one
//   cub::BlockReduce<SumPair, 1024> adds both at once; thread 0 computes
//     average  = sum / d,   variance = __frcp_rn(sqrtf(sumsq / d - powf(average, 2.0)) + epsilon)
//   i.e. EPSILON ADDED TO THE STANDARD DEVIATION, outside the square root (the operator's CPU reference does the
//   same), the variable named variance holding 1 / (std + eps); y = half((x - average) * variance * s + b).
//   The "folding" scheme (d > 1024, d a multiple of the warp size 32, else shape_not_support): a block of 1024
//   threads (32 warps), NUM_ITEMS_THREAD = ceil((d / 32) / 32) items per thread in cub's BLOCKED arrangement
//   (BlockLoad / BlockStore, default BLOCK_LOAD_DIRECT: thread t owns the consecutive items t * N .. t * N + N - 1,
//   guarded by d, zeros past the row), x, s and b all loaded that way into fp32 registers, one block per row,
//   grid n.
// Fixed: sumsq / d - average^2 is a difference of nearly equal numbers when a row's mean is large against its spread
// (a constant row above all): rounding makes it slightly negative, sqrtf returns NaN and the whole row is NaN; the
// difference is clamped at 0 here.
// Changed: the kernel text (compiled by NVRTC per device and per d) is an ordinary template in this file, the
// launcher instantiates the widths 1280 .. 8192 it supports; the "padding" scheme for d <= 1024 (block = d, one item
// per thread, compiled for every d) is not ported; the device's block limit and warp size are the constants 1024 and
// 32; cub::Sum() (gone from CCCL 3) is a local functor; the Rust launch became a C++ launcher over byte strides and a
// stream.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_store.cuh>
#include <cstddef>
#include <cstdint>

namespace operators {
namespace layer_norm {

struct SumPair {
  float average;
  float variance;

  __device__ SumPair operator+(const SumPair& other) const {
    return SumPair{this->average + other.average, this->variance + other.variance};
  }
};

// cub::Sum(), which CCCL 3 (CUDA 13) removed
struct Sum {
  template <class T>
  __device__ __forceinline__ T operator()(const T& a, const T& b) const {
    return a + b;
  }
};

template <unsigned int BLOCK_SIZE, unsigned int NUM_ITEMS_THREAD, class Tw, class Ta>
static __device__ void folding(Ta* __restrict__ y_, int const stride_y, Ta const* __restrict__ x_, int const stride_x,
                               Tw const* __restrict__ s_, Tw const* __restrict__ b_, float const epsilon,
                               unsigned int const items_size) {
  y_ += static_cast<int64_t>(blockIdx.x) * stride_y;
  x_ += static_cast<int64_t>(blockIdx.x) * stride_x;

  float data[NUM_ITEMS_THREAD], scale[NUM_ITEMS_THREAD], bias[NUM_ITEMS_THREAD];
  {
    using BlockOp = cub::BlockLoad<float, BLOCK_SIZE, NUM_ITEMS_THREAD>;
    __shared__ typename BlockOp::TempStorage temp_storage;
    BlockOp(temp_storage).Load(x_, data, items_size, 0.f);
    BlockOp(temp_storage).Load(s_, scale, items_size, 0.f);
    BlockOp(temp_storage).Load(b_, bias, items_size, 0.f);
  }

  float sum_average = 0, sum_variance = 0;
#pragma unroll
  for (unsigned int i = 0; i < NUM_ITEMS_THREAD; ++i) {
    sum_average += data[i];
    sum_variance += data[i] * data[i];
  }

  SumPair tmp_sum = {sum_average, sum_variance};
  using BlockOp = cub::BlockReduce<SumPair, BLOCK_SIZE>;
  __shared__ typename BlockOp::TempStorage temp_storge;
  SumPair sum_pair = BlockOp(temp_storge).Reduce(tmp_sum, Sum());

  __shared__ float average, variance;
  if (threadIdx.x == 0) {
    average = sum_pair.average / float(items_size);
    const float mean_square_minus_square_mean = sum_pair.variance / float(items_size) - powf(average, 2.0);
    variance = __frcp_rn(sqrtf(fmaxf(mean_square_minus_square_mean, 0.f)) + epsilon);
  }
  __syncthreads();

#pragma unroll
  for (unsigned int i = 0; i < NUM_ITEMS_THREAD; ++i) {
    data[i] = (data[i] - average) * variance * scale[i] + bias[i];
  }

  {
    using BlockOp = cub::BlockStore<float, BLOCK_SIZE, NUM_ITEMS_THREAD>;
    __shared__ typename BlockOp::TempStorage temp_storage;
    BlockOp(temp_storage).Store(y_, data, items_size);
  }
}

}  // namespace layer_norm
}  // namespace operators

// the generated wrapper: layer_norm_{ta}_{tw}_folding_{NUM_THREADS_BLOCK}x{NUM_ITEMS_THREAD}, d written in as a literal
/* kerntune:
args  = ["y: out f16[n * d]", "stride_y: i32 = d", "x: in f16[n * d]", "stride_x: i32 = d", "s: in f32[d]",
         "b: in f32[d]", "epsilon: f32 = 1e-5"]
sizes = [{ n = 16384, d = 1600 }, { n = 4, d = 1600 }, { n = 999, d = 1600 }]
grid  = "n"
block = 1024
template_args = ["1024", "2", "1600", "__half", "float"]
*/
template <unsigned int NUM_THREADS_BLOCK, unsigned int NUM_ITEMS_THREAD, unsigned int D, class Ta, class Tw>
__global__ void layer_norm_folding(Ta* __restrict__ y, int const stride_y, Ta const* __restrict__ x,
                                   int const stride_x, Tw const* __restrict__ s, Tw const* __restrict__ b,
                                   float epsilon) {
  operators::layer_norm::folding<NUM_THREADS_BLOCK, NUM_ITEMS_THREAD>(y, stride_y, x, stride_x, s, b, epsilon, D);
}

namespace operators {
namespace layer_norm {

enum class LaunchError { Ok, StridesNotSupport, ShapeNotSupport };

constexpr unsigned int kBlockSize = 1024;  // device.block_limit().max_threads
constexpr unsigned int kWarpSize = 32;     // device.warp_size()

template <unsigned int D>
static void launch_folding(__half* y, int nsy, const __half* x, int nsx, const float* s, const float* b, float epsilon,
                           unsigned int n, cudaStream_t queue) {
  constexpr unsigned int max_num_warp_block = kBlockSize / kWarpSize;
  constexpr unsigned int to_divid = D / kWarpSize;
  constexpr unsigned int num_warps_block = max_num_warp_block;
  constexpr unsigned int num_threads_block = kWarpSize * num_warps_block;
  constexpr unsigned int num_items_thread = (to_divid + num_warps_block - 1) / num_warps_block;
  static_assert(D > kBlockSize && D % kWarpSize == 0, "the folding scheme");
  // SchemeType::Folding { block_size } launches block_size threads
  layer_norm_folding<num_threads_block, num_items_thread, D><<<n, kBlockSize, 0, queue>>>(y, nsy, x, nsx, s, b,
                                                                                          epsilon);
}

// Operator::launch for fp16 activations and fp32 scale / bias: y, x [n, d] with row strides in bytes (column
// strides must be the element size). Device pointers.
LaunchError launch(void* y_base, ptrdiff_t nsy, const void* x_base, ptrdiff_t nsx, const float* scale_base,
                   const float* bias_base, float epsilon, size_t n, size_t d, cudaStream_t queue) {
  const ptrdiff_t unit = sizeof(__half);
  if (nsy % unit || nsx % unit) return LaunchError::StridesNotSupport;
  if (d <= kBlockSize || d % kWarpSize != 0) return LaunchError::ShapeNotSupport;  // padding scheme not ported
  const int sy = static_cast<int>(nsy / unit);
  const int sx = static_cast<int>(nsx / unit);
  __half* y = static_cast<__half*>(y_base);
  const __half* x = static_cast<const __half*>(x_base);
  const unsigned int rows = static_cast<unsigned int>(n);
  switch (d) {
    case 1280: launch_folding<1280>(y, sy, x, sx, scale_base, bias_base, epsilon, rows, queue); break;
    case 1600: launch_folding<1600>(y, sy, x, sx, scale_base, bias_base, epsilon, rows, queue); break;
    case 2048: launch_folding<2048>(y, sy, x, sx, scale_base, bias_base, epsilon, rows, queue); break;
    case 2560: launch_folding<2560>(y, sy, x, sx, scale_base, bias_base, epsilon, rows, queue); break;
    case 3072: launch_folding<3072>(y, sy, x, sx, scale_base, bias_base, epsilon, rows, queue); break;
    case 4096: launch_folding<4096>(y, sy, x, sx, scale_base, bias_base, epsilon, rows, queue); break;
    case 5120: launch_folding<5120>(y, sy, x, sx, scale_base, bias_base, epsilon, rows, queue); break;
    case 6144: launch_folding<6144>(y, sy, x, sx, scale_base, bias_base, epsilon, rows, queue); break;
    case 8192: launch_folding<8192>(y, sy, x, sx, scale_base, bias_base, epsilon, rows, queue); break;
    default: return LaunchError::ShapeNotSupport;
  }
  return LaunchError::Ok;
}

}  // namespace layer_norm
}  // namespace operators
