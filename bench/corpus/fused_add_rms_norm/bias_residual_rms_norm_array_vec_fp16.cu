// Fused bias + residual add + RMSNorm in the style of lmdeploy TurboMind's BiasResidualRMSNorm (run after the
// attention output projection of models whose o_proj has a bias): both buffers updated in place,
//   residual      = (residual + hidden_states) + bias     (element-wise in fp16, each add rounded; bias nullable)
//   hidden_states = fp16(fp16(residual * inv_rms) * weight),   inv_rms = rsqrt(sum(residual^2) * inv_dims + eps)
// with inv_dims = 1.f / dims computed by the host and passed as an argument. Written with TurboMind's fixed-size
// Array<T, N> register vectors (16 bytes: 8 halves), Load / Ldg / Store helpers that move a whole Array, and
// element-wise operators on Arrays; the sum of squares accumulates an Array<float, 8> per thread, folded and then
// reduced by cub::BlockReduce<float, 512>, thread 0 publishing the rsqrt through __shared__; the second pass re-reads
// the stored residual. One token per block of 512 threads (constexpr kThreads, a template argument of the kernel
// with the vector size), each thread starting at threadIdx.x * 8 and stepping by 512 * 8; dims must be a multiple
// of 8 (the host checks), so the tail shape's hidden size is a multiple of 8 but of no larger power of two.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/block/block_reduce.cuh>
#include <cstdint>
#include <stdexcept>

namespace turbomind {

template <typename T, int N>
struct alignas(sizeof(T) * N) Array {
  T data[N];
  __device__ __forceinline__ T& operator[](int i) { return data[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return data[i]; }
};

template <typename T, int N>
__device__ __forceinline__ void Load(Array<T, N>& dst, const T* src) {
  dst = *reinterpret_cast<const Array<T, N>*>(src);
}

template <typename T, int N>
__device__ __forceinline__ void Ldg(Array<T, N>& dst, const T* src) {
  static_assert(sizeof(Array<T, N>) == sizeof(uint4), "16-byte arrays only");
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(src));
  dst = *reinterpret_cast<const Array<T, N>*>(&raw);
}

template <typename T, int N>
__device__ __forceinline__ void Store(T* dst, const Array<T, N>& src) {
  *reinterpret_cast<Array<T, N>*>(dst) = src;
}

namespace ops {

template <int N>
__device__ __forceinline__ Array<half, N> operator+(const Array<half, N>& a, const Array<half, N>& b) {
  Array<half, N> c;
#pragma unroll
  for (int i = 0; i < N; ++i) c[i] = __hadd(a[i], b[i]);
  return c;
}

template <int N>
__device__ __forceinline__ Array<float, N> operator+(const Array<float, N>& a, const Array<float, N>& b) {
  Array<float, N> c;
#pragma unroll
  for (int i = 0; i < N; ++i) c[i] = a[i] + b[i];
  return c;
}

template <int N>
__device__ __forceinline__ Array<float, N> operator*(const Array<float, N>& a, const Array<float, N>& b) {
  Array<float, N> c;
#pragma unroll
  for (int i = 0; i < N; ++i) c[i] = a[i] * b[i];
  return c;
}

}  // namespace ops

template <typename To, typename From, int N>
__device__ __forceinline__ Array<To, N> cast(const Array<From, N>& a) {
  Array<To, N> c;
#pragma unroll
  for (int i = 0; i < N; ++i) c[i] = static_cast<To>(a[i]);
  return c;
}

/* kerntune:
args  = ["residual: inout f16[num * dims]", "hidden_states: inout f16[num * dims]", "weights: in f16[dims]",
         "bias: in f16[dims]", "dims: i32 = dims", "num: i32 = num", "eps: f32 = 1e-5", "inv_dims: f32 = 1.0 / dims"]
sizes = [{ num = 8192, dims = 4096 }, { num = 8, dims = 7168 }, { num = 37, dims = 1288 }]
grid  = "num"
block = 512
template_args = ["half", "float", "512", "8"]
*/
template <class T, class Tacc, int block_dim, int vec_size>
__global__ void BiasResidualRMSNormKernel(T* __restrict__ residual, T* __restrict__ hidden_states,
                                          const T* __restrict__ weights, const T* __restrict__ bias, int dims,
                                          int num, float eps, float inv_dims) {
  const int ti = blockIdx.x;
  const int di = threadIdx.x * vec_size;
  if (ti >= num) {
    return;
  }
  residual += static_cast<int64_t>(dims) * ti;
  hidden_states += static_cast<int64_t>(dims) * ti;

  Array<Tacc, vec_size> accum{};
  Array<T, vec_size> r_vec;
  Array<T, vec_size> h_vec;
  Array<T, vec_size> b_vec;

  for (int i = di; i < dims; i += block_dim * vec_size) {
    Load(r_vec, &residual[i]);
    Load(h_vec, &hidden_states[i]);
    using namespace ops;
    r_vec = r_vec + h_vec;
    if (bias) {
      Ldg(b_vec, &bias[i]);
      r_vec = r_vec + b_vec;
    }
    Store(&residual[i], r_vec);
    const Array<Tacc, vec_size> tmp = cast<Tacc>(r_vec);
    accum = accum + tmp * tmp;
  }

  float sum{};
#pragma unroll
  for (int i = 0; i < vec_size; ++i) {
    sum += accum[i];
  }

  using BlockReduce = cub::BlockReduce<Tacc, block_dim>;
  __shared__ typename BlockReduce::TempStorage temp_storage;
  sum = BlockReduce{temp_storage}.Sum(sum);

  __shared__ float shared_sum;
  if (threadIdx.x == 0) {
    shared_sum = rsqrtf(sum * inv_dims + eps);
  }
  __syncthreads();
  sum = shared_sum;

  Array<T, vec_size> w_vec;
  for (int i = di; i < dims; i += block_dim * vec_size) {
    Load(r_vec, &residual[i]);
    Ldg(w_vec, &weights[i]);
#pragma unroll
    for (int c = 0; c < vec_size; ++c) {
      r_vec[c] = static_cast<T>(static_cast<float>(r_vec[c]) * sum) * w_vec[c];
    }
    Store(&hidden_states[i], r_vec);
  }
}

// residual, hidden_states: [num, dims] fp16, both updated; weights, bias (or null): [dims] fp16. Device pointers,
// 16-byte aligned; dims a multiple of 8.
template <class T>
void invokeBiasResidualRMSNorm(T* residual, T* hidden_states, const T* weights, const T* bias, int dims, int num,
                               float eps, cudaStream_t st) {
  constexpr int kThreads = 512;
  constexpr int kVecSize = 16 / sizeof(T);
  if (dims % kVecSize != 0) {
    throw std::invalid_argument("dims must be a multiple of the vector size");
  }
  if (num == 0) return;
  const int blocks = num;
  BiasResidualRMSNormKernel<T, float, kThreads, kVecSize>
      <<<blocks, kThreads, 0, st>>>(residual, hidden_states, weights, bias, dims, num, eps, 1.f / dims);
}

template void invokeBiasResidualRMSNorm(half*, half*, const half*, const half*, int, int, float, cudaStream_t);

}  // namespace turbomind
