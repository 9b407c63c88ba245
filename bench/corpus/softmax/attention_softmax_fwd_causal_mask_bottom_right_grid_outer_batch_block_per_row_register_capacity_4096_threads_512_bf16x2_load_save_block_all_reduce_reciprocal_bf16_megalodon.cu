// Attention softmax as Megalodon writes it (XuezheMax/megalodon, megalodon/csrc/softmax.cuh
// AttentionSoftmaxFwdKernel, launched by AttentionSoftmaxCUDAFwdImpl in csrc/ops/attention_softmax_kernel.cu through
// the DISPATCH_ATTENTION_SOFTMAX_CUDA_KERNEL ladder; the chunked-attention softmax of the Megalodon long-context
// model). x and y are [batch, outer, inner] attention scores of one chunk (batch = B * heads, outer = query rows,
// inner = key columns), bf16 storage, fp32 math (T_ACC = at::acc_type). One block per score row, grid
// dim3(outer_size, batch_size): blockIdx.x is the row r inside the chunk, blockIdx.y the (batch, head). The whole
// row is held in registers: kCapacity (the next power of two of inner, here 4096) values spread over kNumThreads
// (512 for 2049..4096 columns), element j of a thread at column j * blockDim.x + threadIdx.x. The causal mask is
// aligned to the bottom right: row r keeps its first n = inner - outer + r + 1 columns, the rest is loaded as -inf.
// Load / Save take a packed __nv_bfloat162 path when the pointer is 4-byte aligned and the row stride (resp. the
// row length) is even, the scalar path otherwise. Max and sum by BlockAllReduce (shfl_down warp reduce, one float
// per warp in __shared__ shm[32], every lane re-reduces the warp sums with shfl_xor); a row whose max is infinite
// is filled with zeros; p = exp(x - m) kept in registers, scaled by c = 1 / d (0 when d == 0) and rounded once on
// the store. Argument order (outer_size, inner_size, use_causal_mask, x, y).
// Changed: at::BFloat16 / c10 math helpers spelled with cuda_bf16.h and plain expf / fmaxf (and
// numeric_limits infinity / lowest as INFINITY / -FLT_MAX: upstream builds with --expt-relaxed-constexpr), the PyTorch tensor
// entry replaced by a host launcher with device pointers and a stream that keeps the size ladder (all of it
// instantiated); the DropKey (dropout) variant and the backward kernel are left out; the wider BF16x4 / BF16x8
// load paths of register_utils are left out (the x2 path and the scalar path kept). No race found (every reuse of
// shm is behind the reduction's leading __syncthreads). Sizes: 16 x 2048 x 4096 (a 2K-query, 4K-key chunk of 16
// heads), decode 32 x 1 x 4000, 3 x 999 x 3001 (odd row length: scalar path, partial last rows).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace megalodon {

namespace cuda_utils {
constexpr int kWarpSize = 32;
}  // namespace cuda_utils

namespace reduce {

template <typename T>
struct SumOp {
  static constexpr T kIdentityElement = T(0);
  __inline__ __device__ T operator()(T lhs, T rhs) const { return lhs + rhs; }
};

template <typename T>
struct MaxOp {
  static constexpr T kIdentityElement = T(-FLT_MAX);
  __inline__ __device__ T operator()(T lhs, T rhs) const { return fmaxf(lhs, rhs); }
};

template <typename T, class ReduceOp>
__inline__ __device__ T WarpReduce(T x, ReduceOp reduce_op) {
#pragma unroll
  for (int offset = (cuda_utils::kWarpSize >> 1); offset > 0; offset >>= 1) {
    x = reduce_op(x, __shfl_down_sync(0xffffffff, x, offset));
  }
  return x;
}

template <typename T, class ReduceOp>
__inline__ __device__ T WarpAllReduce(T x, ReduceOp reduce_op) {
#pragma unroll
  for (int offset = (cuda_utils::kWarpSize >> 1); offset > 0; offset >>= 1) {
    x = reduce_op(x, __shfl_xor_sync(0xffffffff, x, offset));
  }
  return x;
}

template <typename T, class ReduceOp>
__inline__ __device__ T BlockAllReduce(T x, T* shm, ReduceOp reduce_op) {
  if (blockDim.x == cuda_utils::kWarpSize) {
    return WarpAllReduce(x, reduce_op);
  }
  const int64_t tid = threadIdx.x;
  const int64_t lid = tid % cuda_utils::kWarpSize;
  const int64_t wid = tid / cuda_utils::kWarpSize;
  const int64_t num_warps = blockDim.x / cuda_utils::kWarpSize;
  x = WarpReduce(x, reduce_op);
  __syncthreads();
  if (lid == 0) {
    shm[wid] = x;
  }
  __syncthreads();
  x = lid < num_warps ? shm[lid] : ReduceOp::kIdentityElement;
  x = WarpAllReduce(x, reduce_op);
  return x;
}

}  // namespace reduce

namespace register_utils {

template <typename SRC, typename DST, int64_t kElementsPerThread>
__inline__ __device__ void LoadImpl(const SRC* __restrict__ src, int64_t size, DST default_value,
                                    DST* __restrict__ dst) {
#pragma unroll
  for (int64_t i = 0; i < kElementsPerThread; ++i) {
    const int64_t idx = i * blockDim.x + threadIdx.x;
    dst[i] = idx < size ? static_cast<DST>(src[idx]) : default_value;
  }
}

template <int64_t kElementsPerThread>
__inline__ __device__ void LoadBF16x2Impl(const __nv_bfloat16* __restrict__ src, int64_t size, float default_value,
                                          float* __restrict__ dst) {
  const float2 default2 = {default_value, default_value};
  const __nv_bfloat162* src2 = reinterpret_cast<const __nv_bfloat162*>(src);
#pragma unroll
  for (int64_t i = 0; i < kElementsPerThread / 2; ++i) {
    const int64_t idx = i * blockDim.x + threadIdx.x;
    const float2 v2 = idx * 2 < size ? __bfloat1622float2(src2[idx]) : default2;
    dst[i * 2 + 0] = idx * 2 + 0 < size ? v2.x : default_value;
    dst[i * 2 + 1] = idx * 2 + 1 < size ? v2.y : default_value;
  }
}

template <typename SRC, typename DST, int64_t kElementsPerThread>
__inline__ __device__ void SaveImpl(const SRC* __restrict__ src, int64_t size, DST* __restrict__ dst) {
#pragma unroll
  for (int64_t i = 0; i < kElementsPerThread; ++i) {
    const int64_t idx = i * blockDim.x + threadIdx.x;
    if (idx < size) {
      dst[idx] = static_cast<DST>(src[i]);
    }
  }
}

template <int64_t kElementsPerThread>
__inline__ __device__ void SaveBF16x2Impl(const float* __restrict__ src, int64_t size,
                                          __nv_bfloat16* __restrict__ dst) {
  __nv_bfloat162* dst2 = reinterpret_cast<__nv_bfloat162*>(dst);
#pragma unroll
  for (int64_t i = 0; i < kElementsPerThread / 2; ++i) {
    const int64_t idx = i * blockDim.x + threadIdx.x;
    const float2 v2 = {src[i * 2 + 0], src[i * 2 + 1]};
    if (idx * 2 < size) {
      dst2[idx] = __float22bfloat162_rn(v2);
    }
  }
}

// size: valid columns (the rest reads as default_value); stride: the row length, for the alignment test
template <typename SRC, typename DST, int64_t kElementsPerThread>
__inline__ __device__ void Load(const SRC* __restrict__ src, int64_t size, int64_t stride, DST default_value,
                                DST* __restrict__ dst) {
  if constexpr (std::is_same<SRC, __nv_bfloat16>::value && std::is_same<DST, float>::value) {
    if (kElementsPerThread % 2 == 0 && reinterpret_cast<std::uintptr_t>(src) % alignof(__nv_bfloat162) == 0 &&
        stride % 2 == 0) {
      LoadBF16x2Impl<kElementsPerThread>(src, size, default_value, dst);
    } else {
      LoadImpl<__nv_bfloat16, float, kElementsPerThread>(src, size, default_value, dst);
    }
  } else {
    LoadImpl<SRC, DST, kElementsPerThread>(src, size, default_value, dst);
  }
}

template <typename SRC, typename DST, int64_t kElementsPerThread>
__inline__ __device__ void Save(const SRC* __restrict__ src, int64_t size, DST* __restrict__ dst) {
  if constexpr (std::is_same<SRC, float>::value && std::is_same<DST, __nv_bfloat16>::value) {
    if (kElementsPerThread % 2 == 0 && reinterpret_cast<std::uintptr_t>(dst) % alignof(__nv_bfloat162) == 0 &&
        size % 2 == 0) {
      SaveBF16x2Impl<kElementsPerThread>(src, size, dst);
    } else {
      SaveImpl<float, __nv_bfloat16, kElementsPerThread>(src, size, dst);
    }
  } else {
    SaveImpl<SRC, DST, kElementsPerThread>(src, size, dst);
  }
}

}  // namespace register_utils

namespace softmax {

constexpr int64_t kMaxSoftmaxSize = 8192;

template <typename T, int64_t kElementsPerThread>
__inline__ __device__ void BlockFill(int64_t size, T val, T* data) {
#pragma unroll
  for (int64_t i = 0; i < kElementsPerThread; ++i) {
    const int64_t idx = i * blockDim.x + threadIdx.x;
    if (idx < size) {
      data[idx] = val;
    }
  }
}

// Softmax probabilities are ~1 / inner, far below the default absolute tolerance: a small atol.
/* kerntune:
args  = ["outer_size: i64 = outer", "inner_size: i64 = inner", "use_causal_mask: u8 = 1",
         "x: in bf16[batch * outer * inner]", "y: out bf16[batch * outer * inner]"]
sizes = [{ batch = 16, outer = 2048, inner = 4096 }, { batch = 32, outer = 1, inner = 4000 },
         { batch = 3, outer = 999, inner = 3001 }]
grid  = ["outer", "batch", 1]
block = 512
template_args = ["__nv_bfloat16", "float", "4096", "512"]
atol  = 1e-6
*/
template <typename T, typename T_ACC, int64_t kCapacity, int64_t kNumThreads>
__global__ void AttentionSoftmaxFwdKernel(int64_t outer_size, int64_t inner_size, bool use_causal_mask, const T* x,
                                          T* y) {
  constexpr int64_t kElementsPerThread = kCapacity / kNumThreads;
  constexpr T_ACC kInf = T_ACC(INFINITY);

  __shared__ T_ACC shm[cuda_utils::kWarpSize];
  T_ACC x_acc[kElementsPerThread];

  const int64_t i = blockIdx.y * outer_size + blockIdx.x;
  const int64_t r = blockIdx.x;
  const int64_t n = use_causal_mask ? inner_size - outer_size + r + 1 : inner_size;
  T_ACC d = T_ACC(0);
  T_ACC m = -kInf;  // masked columns read as -inf

  register_utils::Load<T, T_ACC, kElementsPerThread>(x + i * inner_size, n, inner_size, -kInf, x_acc);
#pragma unroll
  for (int64_t j = 0; j < kElementsPerThread; ++j) {
    m = fmaxf(m, x_acc[j]);
  }
  m = reduce::BlockAllReduce(m, shm, reduce::MaxOp<T_ACC>());
  if (isinf(m)) {
    BlockFill<T, kElementsPerThread>(inner_size, T(0.0f), y + i * inner_size);
    return;
  }

#pragma unroll
  for (int64_t j = 0; j < kElementsPerThread; ++j) {
    const T_ACC v = expf(x_acc[j] - m);
    x_acc[j] = v;
    d += v;
  }
  d = reduce::BlockAllReduce(d, shm, reduce::SumOp<T_ACC>());

  const T_ACC c = d == T_ACC(0) ? T_ACC(0) : T_ACC(1) / d;
#pragma unroll
  for (int64_t j = 0; j < kElementsPerThread; ++j) {
    x_acc[j] *= c;
  }
  register_utils::Save<T_ACC, T, kElementsPerThread>(x_acc, inner_size, y + i * inner_size);
}

}  // namespace softmax

#define DISPATCH_ATTENTION_SOFTMAX_CUDA_KERNEL(KernelFunc, T, T_ACC, grid, inner_size, shm_size, stream, ...) \
  do {                                                                                                        \
    if (inner_size <= 32) {                                                                                   \
      KernelFunc<T, T_ACC, 32, 32><<<grid, 32, shm_size, stream>>>(__VA_ARGS__);                              \
    } else if (inner_size <= 64) {                                                                            \
      KernelFunc<T, T_ACC, 64, 32><<<grid, 32, shm_size, stream>>>(__VA_ARGS__);                              \
    } else if (inner_size <= 128) {                                                                           \
      KernelFunc<T, T_ACC, 128, 32><<<grid, 32, shm_size, stream>>>(__VA_ARGS__);                             \
    } else if (inner_size <= 256) {                                                                           \
      KernelFunc<T, T_ACC, 256, 32><<<grid, 32, shm_size, stream>>>(__VA_ARGS__);                             \
    } else if (inner_size <= 512) {                                                                           \
      KernelFunc<T, T_ACC, 512, 64><<<grid, 64, shm_size, stream>>>(__VA_ARGS__);                             \
    } else if (inner_size <= 1024) {                                                                          \
      KernelFunc<T, T_ACC, 1024, 128><<<grid, 128, shm_size, stream>>>(__VA_ARGS__);                          \
    } else if (inner_size <= 2048) {                                                                          \
      KernelFunc<T, T_ACC, 2048, 256><<<grid, 256, shm_size, stream>>>(__VA_ARGS__);                          \
    } else if (inner_size <= 4096) {                                                                          \
      KernelFunc<T, T_ACC, 4096, 512><<<grid, 512, shm_size, stream>>>(__VA_ARGS__);                          \
    } else {                                                                                                  \
      KernelFunc<T, T_ACC, 8192, 1024><<<grid, 1024, shm_size, stream>>>(__VA_ARGS__);                        \
    }                                                                                                         \
  } while (false)

// x, y: [batch_size, outer_size, inner_size] bf16, contiguous. Returns -1 for rows longer than kMaxSoftmaxSize or a
// causal chunk with more query rows than key columns.
int AttentionSoftmaxFwd(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t batch_size, int64_t outer_size,
                        int64_t inner_size, bool use_causal_mask, cudaStream_t cuda_stream) {
  if (inner_size > softmax::kMaxSoftmaxSize || (use_causal_mask && inner_size < outer_size)) {
    return -1;
  }
  constexpr int64_t kShmSize = 0;
  const dim3 grid(static_cast<unsigned>(outer_size), static_cast<unsigned>(batch_size));
  DISPATCH_ATTENTION_SOFTMAX_CUDA_KERNEL(softmax::AttentionSoftmaxFwdKernel, __nv_bfloat16, float, grid, inner_size,
                                         kShmSize, cuda_stream, outer_size, inner_size, use_causal_mask, x, y);
  return 0;
}

}  // namespace megalodon
