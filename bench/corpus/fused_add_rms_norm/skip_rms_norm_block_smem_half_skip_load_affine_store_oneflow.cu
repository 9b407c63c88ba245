// Skip (residual) + bias + RMSNorm as OneFlow writes it (oneflow/user/kernels/skip_rms_norm_kernel.cu, SkipLoad /
// AffineStore over core/cuda/rms_norm.cuh RmsNormBlockSMemImpl), fp16 with float compute, rows longer than 1024:
//   v       = float(x + bias + skip * half(alpha))  the residual add IN HALF arithmetic (SkipLoad, SRC = half), every
//             step rounded, bias and skip nullable (0)
//   inv_rms = rsqrt(mean(v^2) + eps)                 float, stored per row (a second output, kept for the backward)
//   y       = half(v * inv_rms) * weight             rounded to half, then multiplied by the weight in half
//                                                    (AffineStore<float, half, affine = true>)
// The summed residual is NOT written back: only y and inv_rms leave the kernel. OneFlow's conventions: the norm body
// generic over LOAD / STORE functors (load.template load<pack_size>(dst, row, col) / store.template store<...>) on
// Pack<T, N> unions of std::aligned_storage; the row staged as float in dynamic shared memory (ncol * sizeof(float)),
// block_size a template constant used as the loop stride, rows in a grid-stride loop (row += gridDim.x),
// layer_norm::BlockAllReduce (cub::BlockReduce + a __shared__ broadcast), eps a double; the launcher tries block
// sizes 128, 1024, 512, 256 through a SELECT_BLOCK_SIZE_CONF macro and keeps a larger one only when it reaches the
// same occupancy as 128 (cudaOccupancyMaxActiveBlocksPerMultiprocessor), the grid capped at sm_count * active
// blocks * 32 waves by GetNumBlocks; pack 4 when ncol % 4 == 0 and the pointers allow it (spec = <half, float, 4,
// 128, true>). The occupancy and device queries are not available under the test's runtime stubs: an H100 model
// (2048 threads, 228 KB of shared memory and 1 KB reserved per block per SM, 132 SMs) stands in for them, which
// picks 128 threads for these rows. OneFlow passes the two functors to the kernel BY VALUE; a struct argument has no
// spec form, so their fields are unpacked into the kernel's arguments in order (src, bias, skip, alpha, load
// row_size; dst, weight, store row_size) and the functors rebuilt in the kernel, the body unchanged; the
// SELECT_BLOCK_SIZE_CONF(...) statements get a trailing `;` (a `{...};` in the expansion), since kerntune's parser
// does not read a macro statement without one.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/cub.cuh>
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <type_traits>

namespace oneflow {
namespace cuda {
namespace layer_norm {

template <typename T>
struct SumOp {
  __device__ __forceinline__ T operator()(const T& a, const T& b) const { return a + b; }
};

template <template <typename> class ReductionOp, typename T, int block_size>
__inline__ __device__ T BlockAllReduce(T val) {
  typedef cub::BlockReduce<T, block_size> BlockReduce;
  __shared__ typename BlockReduce::TempStorage temp_storage;
  __shared__ T result_broadcast;
  T result = BlockReduce(temp_storage).Reduce(val, ReductionOp<T>());
  if (threadIdx.x == 0) {
    result_broadcast = result;
  }
  __syncthreads();
  return result_broadcast;
}

template <typename T>
__inline__ __device__ T Div(T a, T b);

template <>
__inline__ __device__ float Div<float>(float a, float b) {
  return a / b;
}

template <typename T>
__inline__ __device__ T Rsqrt(T x);

template <>
__inline__ __device__ float Rsqrt<float>(float x) {
  return rsqrt(x);
}

template <typename T, int N>
struct GetPackType {
  using type = typename std::aligned_storage<N * sizeof(T), N * sizeof(T)>::type;
};

template <typename T, int N>
using PackType = typename GetPackType<T, N>::type;

template <typename T, int N>
union Pack {
  static_assert(sizeof(PackType<T, N>) == sizeof(T) * N, "");
  __device__ Pack() {
    // do nothing
  }
  PackType<T, N> storage;
  T elem[N];
};

// H100 SXM stand-ins for the device queries (see the header comment).
constexpr int kSmCount = 132;
constexpr int kMaxThreadsPerSM = 2048;
constexpr int kMaxBlocksPerSM = 32;
constexpr size_t kSmemPerSM = 228 * 1024;
constexpr size_t kReservedSmemPerBlock = 1024;

inline int MaxActiveBlocksPerMultiprocessor(int block_size, size_t dynamic_smem_size) {
  int by_threads = kMaxThreadsPerSM / block_size;
  int by_smem = (int)(kSmemPerSM / (dynamic_smem_size + kReservedSmemPerBlock));
  return std::min(kMaxBlocksPerSM, std::min(by_threads, by_smem));
}

inline cudaError_t GetNumBlocks(int64_t block_size, size_t dynamic_smem_size, int64_t max_blocks, int64_t waves,
                                int* num_blocks) {
  int sm_count = kSmCount;
  int max_active_blocks = MaxActiveBlocksPerMultiprocessor((int)block_size, dynamic_smem_size);
  *num_blocks = std::max<int>(1, std::min<int64_t>(max_blocks, sm_count * max_active_blocks * waves));
  return cudaSuccess;
}

}  // namespace layer_norm

namespace rms_norm {

template <typename SRC, typename DST>
struct SkipLoad {
  using LoadType = DST;
  __device__ SkipLoad(const SRC* src, const SRC* bias, const SRC* skip, const float alpha, int64_t row_size)
      : src(src), bias(bias), skip(skip), alpha(alpha), row_size(row_size) {}
  template <int N>
  __device__ void load(DST* dst, int64_t row, int64_t col) const {
    layer_norm::Pack<SRC, N> src_pack;
    layer_norm::Pack<SRC, N> bias_pack;
    layer_norm::Pack<SRC, N> skip_pack;
    const int64_t offset = (row * row_size + col) / N;
    const int64_t bias_offset = col / N;
    src_pack.storage = *(reinterpret_cast<const layer_norm::PackType<SRC, N>*>(src) + offset);
    if (bias) {
      bias_pack.storage = *(reinterpret_cast<const layer_norm::PackType<SRC, N>*>(bias) + bias_offset);
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        bias_pack.elem[i] = static_cast<SRC>(0.f);
      }
    }
    if (skip) {
      skip_pack.storage = *(reinterpret_cast<const layer_norm::PackType<SRC, N>*>(skip) + offset);
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        skip_pack.elem[i] = static_cast<SRC>(0.f);
      }
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
      dst[i] = static_cast<DST>(src_pack.elem[i] + bias_pack.elem[i] + skip_pack.elem[i] * static_cast<SRC>(alpha));
    }
  }
  const SRC* src;
  const SRC* bias;
  const SRC* skip;
  float alpha;
  int64_t row_size;
};

template <typename SRC, typename DST, bool affine>
struct AffineStore {
  __device__ AffineStore(DST* dst, const DST* weight, int32_t row_size)
      : dst(dst), weight(weight), row_size(row_size) {}

  template <int N>
  __device__ void store(const SRC* src, int32_t row, int32_t col) {
    layer_norm::Pack<DST, N> dst_pack;
    layer_norm::Pack<DST, N> weight_pack;
    const int32_t offset = (row * row_size + col) / N;
    const int32_t weight_offset = col / N;
    if (affine) {
      weight_pack.storage = *(reinterpret_cast<const layer_norm::PackType<DST, N>*>(weight) + weight_offset);
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (affine) {
        dst_pack.elem[i] = static_cast<DST>(src[i]) * weight_pack.elem[i];
      } else {
        dst_pack.elem[i] = static_cast<DST>(src[i]);
      }
    }
    *(reinterpret_cast<layer_norm::PackType<DST, N>*>(dst) + offset) = dst_pack.storage;
  }

  DST* dst;
  const DST* weight;
  int32_t row_size;
};

/* kerntune:
args  = ["src: in f16[nrow * ncol]", "bias: in f16[ncol]", "skip: in f16[nrow * ncol]", "alpha: f32 = 1.0",
         "load_row_size: i64 = ncol", "dst: out f16[nrow * ncol]", "weight: in f16[ncol]",
         "store_row_size: i32 = ncol", "nrow: i32 = nrow", "ncol: i32 = ncol", "eps: f64 = 1e-6",
         "inv_rms: out f32[nrow]"]
sizes = [{ nrow = 8192, ncol = 4096 }, { nrow = 8, ncol = 5120 }, { nrow = 1001, ncol = 3076 }]
grid  = "nrow"
block = 128
smem  = "4 * ncol"
template_args = ["half", "float", "4", "128", "true"]
*/
template <typename T, typename ComputeType, int pack_size, int block_size, bool affine>
__global__ void RmsNormBlockSMemImpl(const T* src, const T* bias, const T* skip, const float alpha,
                                     const int64_t load_row_size, T* dst, const T* weight,
                                     const int32_t store_row_size, const int nrow, const int ncol, const double eps,
                                     ComputeType* inv_rms) {
  SkipLoad<T, ComputeType> load(src, bias, skip, alpha, load_row_size);
  AffineStore<ComputeType, T, affine> store(dst, weight, store_row_size);

  extern __shared__ __align__(sizeof(double)) unsigned char shared_buf[];
  auto* buf = reinterpret_cast<ComputeType*>(shared_buf);
  assert(ncol % pack_size == 0);
  const int num_packs = ncol / pack_size;
  for (int row = blockIdx.x; row < nrow; row += gridDim.x) {
    ComputeType thread_square_sum = 0;
    for (int pack_i = threadIdx.x; pack_i < num_packs; pack_i += block_size) {
      ComputeType pack[pack_size];
      const int col = pack_i * pack_size;
      load.template load<pack_size>(pack, row, col);
#pragma unroll
      for (int pack_j = 0; pack_j < pack_size; ++pack_j) {
        buf[pack_i * pack_size + pack_j] = pack[pack_j];
        thread_square_sum += pack[pack_j] * pack[pack_j];
      }
    }
    ComputeType row_square_sum =
        layer_norm::BlockAllReduce<layer_norm::SumOp, ComputeType, block_size>(thread_square_sum);
    ComputeType row_square_mean = layer_norm::Div(row_square_sum, static_cast<ComputeType>(ncol));
    ComputeType row_inv_rms = layer_norm::Rsqrt(row_square_mean + static_cast<ComputeType>(eps));
    if (threadIdx.x == 0) {
      inv_rms[row] = row_inv_rms;
    }
    for (int pack_i = threadIdx.x; pack_i < num_packs; pack_i += block_size) {
      ComputeType pack[pack_size];
#pragma unroll
      for (int pack_j = 0; pack_j < pack_size; ++pack_j) {
        pack[pack_j] = buf[pack_i * pack_size + pack_j] * row_inv_rms;
      }
      const int col = pack_i * pack_size;
      store.template store<pack_size>(pack, row, col);
    }
  }
}

// The fields the SkipLoad / AffineStore functors would carry to the kernel.
struct SkipRmsNormArgs {
  const half* x;
  const half* bias;
  const half* skip;
  float alpha;
  half* y;
  const half* w;
};

template <typename ComputeType, int pack_size, int block_size>
cudaError_t LaunchRmsNormBlockSMemImpl(cudaStream_t stream, const SkipRmsNormArgs& a, size_t smem_size,
                                       const int64_t nrow, const int64_t ncol, const double eps,
                                       ComputeType* inv_rms) {
  constexpr int waves = 32;
  int grid_dim_x;
  {
    cudaError_t err = layer_norm::GetNumBlocks(block_size, smem_size, nrow, waves, &grid_dim_x);
    if (err != cudaSuccess) {
      return err;
    }
  }
  RmsNormBlockSMemImpl<half, ComputeType, pack_size, block_size, true><<<grid_dim_x, block_size, smem_size, stream>>>(
      a.x, a.bias, a.skip, a.alpha, ncol, a.y, a.w, (int32_t)ncol, (int)nrow, (int)ncol, eps, inv_rms);
  return cudaGetLastError();
}

template <typename ComputeType, int pack_size>
cudaError_t TryDispatchLaunchRmsNormBlockSMemImplBlockSize(cudaStream_t stream, const SkipRmsNormArgs& a,
                                                           const int64_t nrow, const int64_t ncol, const double eps,
                                                           ComputeType* inv_rms, bool* success) {
  constexpr int block_size_conf_1 = 128;
  constexpr int block_size_conf_2 = 256;
  constexpr int block_size_conf_3 = 512;
  constexpr int block_size_conf_4 = 1024;
  const size_t smem_size = ncol * sizeof(ComputeType);
  int max_active_blocks = 0;
  int num_blocks = 0;

#define SELECT_BLOCK_SIZE_CONF(block_size_conf)                                                        \
  {                                                                                                    \
    num_blocks = layer_norm::MaxActiveBlocksPerMultiprocessor(block_size_conf, smem_size);            \
    if (max_active_blocks == 0) {                                                                      \
      if (num_blocks <= max_active_blocks) {                                                           \
        *success = false;                                                                              \
        return cudaSuccess;                                                                            \
      }                                                                                                \
      max_active_blocks = num_blocks;                                                                  \
    } else {                                                                                           \
      if (num_blocks == max_active_blocks) {                                                           \
        *success = true;                                                                               \
        return LaunchRmsNormBlockSMemImpl<ComputeType, pack_size, block_size_conf>(stream, a, smem_size, \
                                                                                   nrow, ncol, eps, inv_rms); \
      }                                                                                                \
    }                                                                                                  \
  }

  SELECT_BLOCK_SIZE_CONF(block_size_conf_1);
  SELECT_BLOCK_SIZE_CONF(block_size_conf_4);
  SELECT_BLOCK_SIZE_CONF(block_size_conf_3);
  SELECT_BLOCK_SIZE_CONF(block_size_conf_2);
#undef SELECT_BLOCK_SIZE_CONF

  *success = true;
  return LaunchRmsNormBlockSMemImpl<ComputeType, pack_size, block_size_conf_1>(stream, a, smem_size, nrow, ncol, eps,
                                                                               inv_rms);
}

inline bool IsAlignedForPack(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// x, skip, y: [nrow, ncol] half; bias, w: [ncol] half (bias, skip nullable); inv_rms: [nrow] float; device pointers.
// Rows of more than 1024 columns (the warp path for shorter rows and the uncached fallback are not written here).
cudaError_t SkipRmsNormForward(cudaStream_t stream, const int64_t nrow, const int64_t ncol, const double eps,
                               const double alpha, const half* x_dptr, const half* w_dptr, const half* skip_dptr,
                               const half* bias_dptr, half* y_dptr, float* inv_rms) {
  SkipRmsNormArgs a{x_dptr, bias_dptr, skip_dptr, (float)alpha, y_dptr, w_dptr};
  bool success = false;
  const bool pack4 = ncol % 4 == 0 && IsAlignedForPack(x_dptr, 8) && IsAlignedForPack(skip_dptr, 8) &&
                     IsAlignedForPack(bias_dptr, 8) && IsAlignedForPack(y_dptr, 8) && IsAlignedForPack(w_dptr, 8);
  const bool pack2 = ncol % 2 == 0 && IsAlignedForPack(x_dptr, 4) && IsAlignedForPack(skip_dptr, 4) &&
                     IsAlignedForPack(bias_dptr, 4) && IsAlignedForPack(y_dptr, 4) && IsAlignedForPack(w_dptr, 4);
  if (pack4) {
    return TryDispatchLaunchRmsNormBlockSMemImplBlockSize<float, 4>(stream, a, nrow, ncol, eps, inv_rms, &success);
  } else if (pack2) {
    return TryDispatchLaunchRmsNormBlockSMemImplBlockSize<float, 2>(stream, a, nrow, ncol, eps, inv_rms, &success);
  } else {
    return TryDispatchLaunchRmsNormBlockSMemImplBlockSize<float, 1>(stream, a, nrow, ncol, eps, inv_rms, &success);
  }
}

}  // namespace rms_norm
}  // namespace cuda
}  // namespace oneflow
