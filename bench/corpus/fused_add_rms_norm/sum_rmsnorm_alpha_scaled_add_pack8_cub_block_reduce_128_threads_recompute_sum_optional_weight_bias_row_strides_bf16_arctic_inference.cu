// Fused (scaled) add + RMSNorm in the style of Snowflake ArcticInference (csrc/custom_ops/sum_lstm.cu:
// sum_lstm_vec_kernel behind sum_lstm_cuda, the fused step of its LSTM speculator, whose first stage sums the
// state and the projected input, c = s + alpha * z, and RMS-normalizes the sum with optional weight and bias;
// that stage is written here as a kernel of its own, the gates and GELUs that follow it left out), bf16:
//   states, z [rows, D] each with its own row stride (int64), out [rows, D] with its own; weight and bias [D]
//   optional (nullptr skips them); argument order out, states, z, weight, bias, the three row strides, D, alpha,
//   eps; __restrict__ pointers of DevHalf<ATenScalarT>::type (at::BFloat16 -> __nv_bfloat16)
//   one row per block of BLOCK_THREADS, VEC = 8 elements per Pack<H, VEC> (16-byte aligned struct) in a
//   block-stride loop over D / VEC packs; no scalar tail in this kernel (the host takes it only for D % 8 == 0)
//   pass 1: c = float(s) + alpha * float(z) per element, sum of c * c in float, cub::BlockReduce<float,
//   BLOCK_THREADS>::Sum, thread 0 writes __shared__ inv_rms = rsqrtf(sum / D + eps)
//   pass 2: the sum is RECOMPUTED from states and z (never stored), cn = c * inv_rms, * w, + b in float, one
//   rounding per element, written as packs
//   host: vec8 with 128 threads when D, the strides and the pointers allow 8-wide packs, else vec4 with 256
//   threads, else a scalar kernel of 256 (kept, not taken by these sizes); ArcticInference's LAUNCH_VEC macro
// No bug found. alpha 0.5 as the speculator's state-weight scale.
#include <cub/block/block_reduce.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace at {
struct Half;      // ATen scalar tags (torch's c10::Half / c10::BFloat16 in the real build)
struct BFloat16;
}  // namespace at

template <typename T>
struct DevHalf;

template <>
struct DevHalf<at::Half> {
  using type = __half;
  static __device__ __forceinline__ float to_float(type v) { return __half2float(v); }
  static __device__ __forceinline__ type from_float(float v) { return __float2half_rn(v); }
};

template <>
struct DevHalf<at::BFloat16> {
  using type = __nv_bfloat16;
  static __device__ __forceinline__ float to_float(type v) { return __bfloat162float(v); }
  static __device__ __forceinline__ type from_float(float v) { return __float2bfloat16_rn(v); }
};

template <typename H, int VEC>
struct alignas(sizeof(H) * VEC) Pack {
  H v[VEC];
};

static inline bool is_aligned(const void *p, size_t a) {
  return (reinterpret_cast<uintptr_t>(p) % a) == 0;
}

/* kerntune:
args  = ["out: out bf16[rows * D]", "states: in bf16[rows * D]", "z: in bf16[rows * D]", "weight: in bf16[D]",
         "bias: in bf16[D]", "states_row_stride: i64 = D", "z_row_stride: i64 = D", "out_row_stride: i64 = D",
         "D: i32 = D", "alpha: f32 = 0.5", "eps: f32 = 1e-6"]
sizes = [{ rows = 8192, D = 4096 }, { rows = 4, D = 4096 }, { rows = 999, D = 1000 }]
grid  = "rows"
block = 128
template_args = ["at::BFloat16", "8", "128"]
*/
template <typename ATenScalarT, int VEC, int BLOCK_THREADS>
__global__ void sum_rmsnorm_vec_kernel(
    typename DevHalf<ATenScalarT>::type *__restrict__ out,
    const typename DevHalf<ATenScalarT>::type *__restrict__ states,
    const typename DevHalf<ATenScalarT>::type *__restrict__ z,
    const typename DevHalf<ATenScalarT>::type *__restrict__ weight,
    const typename DevHalf<ATenScalarT>::type *__restrict__ bias,
    int64_t states_row_stride, int64_t z_row_stride, int64_t out_row_stride,
    int D, float alpha, float eps) {
  using DH = DevHalf<ATenScalarT>;
  using H = typename DH::type;
  using VPack = Pack<H, VEC>;
  using BlockReduce = cub::BlockReduce<float, BLOCK_THREADS>;

  const int row = blockIdx.x;
  const VPack *s_vec = reinterpret_cast<const VPack *>(states + row * states_row_stride);
  const VPack *z_vec = reinterpret_cast<const VPack *>(z + row * z_row_stride);
  VPack *o_vec = reinterpret_cast<VPack *>(out + row * out_row_stride);

  const int vec_len = D / VEC;

  // pass 1: sum of squares of s + alpha * z
  float local_ss = 0.f;
  for (int i = threadIdx.x; i < vec_len; i += BLOCK_THREADS) {
    VPack sp = s_vec[i];
    VPack zp = z_vec[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float c = DH::to_float(sp.v[k]) + alpha * DH::to_float(zp.v[k]);
      local_ss += c * c;
    }
  }

  __shared__ typename BlockReduce::TempStorage temp;
  float sumsq = BlockReduce(temp).Sum(local_ss);

  __shared__ float inv_rms;
  if (threadIdx.x == 0) {
    float mean = sumsq / static_cast<float>(D);
    inv_rms = rsqrtf(mean + eps);
  }
  __syncthreads();

  // pass 2: the sum again, normalized, optional affine
  const VPack *w_vec = reinterpret_cast<const VPack *>(weight);
  const VPack *b_vec = reinterpret_cast<const VPack *>(bias);
  const bool use_w = (weight != nullptr);
  const bool use_b = (bias != nullptr);

  for (int i = threadIdx.x; i < vec_len; i += BLOCK_THREADS) {
    VPack sp = s_vec[i];
    VPack zp = z_vec[i];
    VPack wp, bp, op;
    if (use_w)
      wp = w_vec[i];
    if (use_b)
      bp = b_vec[i];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      float c = DH::to_float(sp.v[k]) + alpha * DH::to_float(zp.v[k]);
      float cn = c * inv_rms;
      if (use_w)
        cn *= DH::to_float(wp.v[k]);
      if (use_b)
        cn += DH::to_float(bp.v[k]);
      op.v[k] = DH::from_float(cn);
    }
    o_vec[i] = op;
  }
}

template <typename ATenScalarT, int BLOCK_THREADS>
__global__ void sum_rmsnorm_scalar_kernel(
    typename DevHalf<ATenScalarT>::type *__restrict__ out,
    const typename DevHalf<ATenScalarT>::type *__restrict__ states,
    const typename DevHalf<ATenScalarT>::type *__restrict__ z,
    const typename DevHalf<ATenScalarT>::type *__restrict__ weight,
    const typename DevHalf<ATenScalarT>::type *__restrict__ bias,
    int64_t states_row_stride, int64_t z_row_stride, int64_t out_row_stride,
    int D, float alpha, float eps) {
  using DH = DevHalf<ATenScalarT>;
  using H = typename DH::type;
  using BlockReduce = cub::BlockReduce<float, BLOCK_THREADS>;

  const int row = blockIdx.x;
  const H *s = states + row * states_row_stride;
  const H *zr = z + row * z_row_stride;
  H *o = out + row * out_row_stride;

  float local_ss = 0.f;
  for (int j = threadIdx.x; j < D; j += BLOCK_THREADS) {
    float c = DH::to_float(s[j]) + alpha * DH::to_float(zr[j]);
    local_ss += c * c;
  }

  __shared__ typename BlockReduce::TempStorage temp;
  float sumsq = BlockReduce(temp).Sum(local_ss);

  __shared__ float inv_rms;
  if (threadIdx.x == 0) {
    inv_rms = rsqrtf(sumsq / static_cast<float>(D) + eps);
  }
  __syncthreads();

  for (int j = threadIdx.x; j < D; j += BLOCK_THREADS) {
    float cn = (DH::to_float(s[j]) + alpha * DH::to_float(zr[j])) * inv_rms;
    if (weight)
      cn *= DH::to_float(weight[j]);
    if (bias)
      cn += DH::to_float(bias[j]);
    o[j] = DH::from_float(cn);
  }
}

// out, states, z: device [rows, D] rows at the given strides (elements); weight, bias: device [D] or nullptr.
template <typename ATenScalarT>
void sum_rmsnorm_cuda_impl(typename DevHalf<ATenScalarT>::type *out,
                           const typename DevHalf<ATenScalarT>::type *states,
                           const typename DevHalf<ATenScalarT>::type *z,
                           const typename DevHalf<ATenScalarT>::type *weight,
                           const typename DevHalf<ATenScalarT>::type *bias,
                           int64_t rows, int64_t s_stride, int64_t z_stride, int64_t out_stride,
                           int64_t D, double alpha_d, double eps_d, cudaStream_t stream) {
  const bool row_aligned_8 = (s_stride % 8 == 0) && (z_stride % 8 == 0) && (out_stride % 8 == 0);
  const bool row_aligned_4 = (s_stride % 4 == 0) && (z_stride % 4 == 0) && (out_stride % 4 == 0);
  const bool base_aligned_16 = is_aligned(states, 16) && is_aligned(z, 16) && is_aligned(out, 16) &&
                               (!weight || is_aligned(weight, 16)) && (!bias || is_aligned(bias, 16));
  const bool base_aligned_8 = is_aligned(states, 8) && is_aligned(z, 8) && is_aligned(out, 8) &&
                              (!weight || is_aligned(weight, 8)) && (!bias || is_aligned(bias, 8));
  const bool can_vec8 = (D % 8 == 0) && row_aligned_8 && base_aligned_16;
  const bool can_vec4 = (D % 4 == 0) && row_aligned_4 && base_aligned_8;

  const float alpha = static_cast<float>(alpha_d);
  const float eps = static_cast<float>(eps_d);

  constexpr int BLK_128 = 128;
  constexpr int BLK_256 = 256;

  dim3 grid(rows);

#define LAUNCH_VEC(V, BLK)                                                           \
  do {                                                                               \
    dim3 block((BLK));                                                               \
    sum_rmsnorm_vec_kernel<ATenScalarT, (V), (BLK)><<<grid, block, 0, stream>>>(     \
        out, states, z, weight, bias, s_stride, z_stride, out_stride,                \
        static_cast<int>(D), alpha, eps);                                            \
  } while (0)

  if (can_vec8) {
    LAUNCH_VEC(8, BLK_128);
  } else if (can_vec4) {
    LAUNCH_VEC(4, BLK_256);
  } else {
    dim3 block(BLK_256);
    sum_rmsnorm_scalar_kernel<ATenScalarT, BLK_256><<<grid, block, 0, stream>>>(
        out, states, z, weight, bias, s_stride, z_stride, out_stride, static_cast<int>(D), alpha, eps);
  }

#undef LAUNCH_VEC
}

template void sum_rmsnorm_cuda_impl<at::BFloat16>(__nv_bfloat16 *, const __nv_bfloat16 *, const __nv_bfloat16 *,
                                                  const __nv_bfloat16 *, const __nv_bfloat16 *, int64_t, int64_t,
                                                  int64_t, int64_t, int64_t, double, double, cudaStream_t);
