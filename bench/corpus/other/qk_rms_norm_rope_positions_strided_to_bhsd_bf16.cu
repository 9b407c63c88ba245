// Fused per-head QK RMSNorm + rotary + layout change as mistral.rs writes it for Qwen3-style attention
// (mistralrs-core/src/cuda/attention_prep.cu, qk_rms_norm_rope_positions): q and k are read through four
// arbitrary element strides (b, h, s, d) -- in practice the [batch, seq, heads, head_dim] projection output
// viewed as [batch, heads, seq, head_dim] -- and written CONTIGUOUS [batch, heads, seq, head_dim], each
// (batch, head, token) row:
//   inv_rms = rsqrtf(sum(x^2) / head_dim + eps)                   (q_eps for q rows, k_eps for k rows)
//   n_j     = x_j * inv_rms * w_j                                  (fp32, not rounded)
//   NeoX pairs (j, j + rot_dim) for j < rot_dim, with rot_dim the number of PAIRS (the cos / sin row width):
//     dst[j]           = T(n_j * cos[pos, j] - n_{j+rot_dim} * sin[pos, j])
//     dst[j + rot_dim] = T(n_{j+rot_dim} * cos[pos, j] + n_j * sin[pos, j])
//   channels from 2 * rot_dim on (partial rotary): dst = T(n_j)
// positions uint32 [batch, seq] index bf16 cos / sin tables [max_pos, rot_dim]; q_weight / k_weight [head_dim].
// Launch: one block per row, the q rows (batch * q_heads * seq) then the k rows in one grid, block = the power
// of two >= head_dim (at least 32, at most 1024); the sum of squares through a __shared__ float reduce[1024]
// halving tree (volatile), each channel re-read from global memory for the output. template <T, bool IS_NEOX>
// behind extern "C" entry points dispatching on is_neox and a dtype code (0 f16, 1 bf16, 2 f32), the stream
// passed as an int64; spec = <bf16, NeoX>.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

template <typename T>
__device__ __forceinline__ float ap_to_float(T value) {
  return static_cast<float>(value);
}
template <>
__device__ __forceinline__ float ap_to_float<__half>(__half value) {
  return __half2float(value);
}
template <>
__device__ __forceinline__ float ap_to_float<__nv_bfloat16>(__nv_bfloat16 value) {
  return __bfloat162float(value);
}

template <typename T>
__device__ __forceinline__ T ap_from_float(float value) {
  return static_cast<T>(value);
}
template <>
__device__ __forceinline__ __half ap_from_float<__half>(float value) {
  return __float2half(value);
}
template <>
__device__ __forceinline__ __nv_bfloat16 ap_from_float<__nv_bfloat16>(float value) {
  return __float2bfloat16(value);
}

// one row: normalize (block-wide sum of squares) then rotate the first 2 * rot_dim channels into dst
template <typename T, bool IS_NEOX>
__device__ __forceinline__ void write_norm_rope_row(const T* __restrict__ src, const T* __restrict__ weight,
                                                    const T* __restrict__ cos, const T* __restrict__ sin,
                                                    T* __restrict__ dst, const int64_t src_base,
                                                    const int64_t src_stride_d, const int head_dim,
                                                    const int rot_dim, const float eps,
                                                    volatile float* __restrict__ reduce) {
  const int tid = threadIdx.x;

  float sum = 0.0f;
  for (int col = tid; col < head_dim; col += blockDim.x) {
    const float v = ap_to_float(src[src_base + col * src_stride_d]);
    sum += v * v;
  }
  reduce[tid] = sum;
  __syncthreads();

  // blockDim.x is a power of two
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (tid < stride) {
      reduce[tid] += reduce[tid + stride];
    }
    __syncthreads();
  }

  const float inv_rms = rsqrtf(reduce[0] / static_cast<float>(head_dim) + eps);

  for (int r = tid; r < rot_dim; r += blockDim.x) {
    int x_idx;
    int y_idx;
    if constexpr (IS_NEOX) {
      x_idx = r;
      y_idx = rot_dim + r;
    } else {
      x_idx = 2 * r;
      y_idx = x_idx + 1;
    }
    const float x = ap_to_float(src[src_base + x_idx * src_stride_d]) * inv_rms * ap_to_float(weight[x_idx]);
    const float y = ap_to_float(src[src_base + y_idx * src_stride_d]) * inv_rms * ap_to_float(weight[y_idx]);
    const float c = ap_to_float(cos[r]);
    const float s = ap_to_float(sin[r]);
    dst[x_idx] = ap_from_float<T>(x * c - y * s);
    dst[y_idx] = ap_from_float<T>(y * c + x * s);
  }

  for (int col = 2 * rot_dim + tid; col < head_dim; col += blockDim.x) {
    const float v = ap_to_float(src[src_base + col * src_stride_d]) * inv_rms * ap_to_float(weight[col]);
    dst[col] = ap_from_float<T>(v);
  }
}

/* kerntune:
args  = ["q: in bf16[batch * seq_len * q_heads * head_dim]", "k: in bf16[batch * seq_len * k_heads * head_dim]",
         "q_weight: in bf16[head_dim]", "k_weight: in bf16[head_dim]",
         "cos: in bf16[4096 * rot_dim] ~ uniform(-1, 1)", "sin: in bf16[4096 * rot_dim] ~ uniform(-1, 1)",
         "positions: in u32[batch * seq_len] ~ randint(0, 4096)",
         "q_out: out bf16[batch * q_heads * seq_len * head_dim]",
         "k_out: out bf16[batch * k_heads * seq_len * head_dim]",
         "q_stride_b: i64 = seq_len * q_heads * head_dim", "q_stride_h: i64 = head_dim",
         "q_stride_s: i64 = q_heads * head_dim", "q_stride_d: i64 = 1",
         "k_stride_b: i64 = seq_len * k_heads * head_dim", "k_stride_h: i64 = head_dim",
         "k_stride_s: i64 = k_heads * head_dim", "k_stride_d: i64 = 1", "batch: i32 = batch",
         "q_heads: i32 = q_heads", "k_heads: i32 = k_heads", "seq_len: i32 = seq_len", "head_dim: i32 = head_dim",
         "rot_dim: i32 = rot_dim", "q_eps: f32 = 1e-6", "k_eps: f32 = 1e-6"]
sizes = [{ batch = 4, seq_len = 2048, q_heads = 32, k_heads = 8, head_dim = 128, rot_dim = 64 },
         { batch = 16, seq_len = 1, q_heads = 32, k_heads = 8, head_dim = 128, rot_dim = 64 },
         { batch = 3, seq_len = 37, q_heads = 14, k_heads = 2, head_dim = 80, rot_dim = 32 }]
grid  = "batch * (q_heads + k_heads) * seq_len"
block = "1024 if head_dim > 512 else 512 if head_dim > 256 else 256 if head_dim > 128 else 128 if head_dim > 64 else 64 if head_dim > 32 else 32"
template_args = ["__nv_bfloat16", "true"]
*/
template <typename T, bool IS_NEOX>
__global__ void qk_rms_norm_rope_positions_kernel(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ q_weight,
    const T* __restrict__ k_weight, const T* __restrict__ cos, const T* __restrict__ sin,
    const uint32_t* __restrict__ positions, T* __restrict__ q_out, T* __restrict__ k_out, const int64_t q_stride_b,
    const int64_t q_stride_h, const int64_t q_stride_s, const int64_t q_stride_d, const int64_t k_stride_b,
    const int64_t k_stride_h, const int64_t k_stride_s, const int64_t k_stride_d, const int batch,
    const int q_heads, const int k_heads, const int seq_len, const int head_dim, const int rot_dim,
    const float q_eps, const float k_eps) {
  __shared__ float reduce[1024];

  const int q_rows = batch * q_heads * seq_len;
  const int row = blockIdx.x;
  const bool is_q = row < q_rows;
  const int local_row = is_q ? row : row - q_rows;
  const int heads = is_q ? q_heads : k_heads;

  // local_row = (batch_idx * heads + head) * seq_len + seq
  const int seq = local_row % seq_len;
  const int tmp = local_row / seq_len;
  const int head = tmp % heads;
  const int batch_idx = tmp / heads;

  const uint32_t pos = positions[batch_idx * seq_len + seq];
  const T* cos_row_ptr = cos + static_cast<int64_t>(pos) * rot_dim;
  const T* sin_row_ptr = sin + static_cast<int64_t>(pos) * rot_dim;

  if (is_q) {
    const int64_t src_base = static_cast<int64_t>(batch_idx) * q_stride_b + static_cast<int64_t>(head) * q_stride_h +
                             static_cast<int64_t>(seq) * q_stride_s;
    T* dst = q_out + static_cast<int64_t>(row) * head_dim;
    write_norm_rope_row<T, IS_NEOX>(q, q_weight, cos_row_ptr, sin_row_ptr, dst, src_base, q_stride_d, head_dim,
                                    rot_dim, q_eps, reduce);
  } else {
    const int64_t src_base = static_cast<int64_t>(batch_idx) * k_stride_b + static_cast<int64_t>(head) * k_stride_h +
                             static_cast<int64_t>(seq) * k_stride_s;
    T* dst = k_out + static_cast<int64_t>(local_row) * head_dim;
    write_norm_rope_row<T, IS_NEOX>(k, k_weight, cos_row_ptr, sin_row_ptr, dst, src_base, k_stride_d, head_dim,
                                    rot_dim, k_eps, reduce);
  }
}

template <typename T, bool IS_NEOX>
void launch_qk_rms_norm_rope_positions(const void* q, const void* k, const void* q_weight, const void* k_weight,
                                       const void* cos, const void* sin, const void* positions, void* q_out,
                                       void* k_out, const int64_t q_stride_b, const int64_t q_stride_h,
                                       const int64_t q_stride_s, const int64_t q_stride_d, const int64_t k_stride_b,
                                       const int64_t k_stride_h, const int64_t k_stride_s, const int64_t k_stride_d,
                                       const int batch, const int q_heads, const int k_heads, const int seq_len,
                                       const int head_dim, const int rot_dim, const float q_eps, const float k_eps,
                                       int64_t stream) {
  if (batch <= 0 || q_heads <= 0 || seq_len <= 0 || head_dim <= 0 || rot_dim <= 0) {
    return;
  }
  const int total_rows = batch * (q_heads + k_heads) * seq_len;
  int block = 32;
  while (block < head_dim && block < 1024) {
    block <<= 1;
  }
  const cudaStream_t custream = (cudaStream_t)stream;
  qk_rms_norm_rope_positions_kernel<T, IS_NEOX><<<total_rows, block, 0, custream>>>(
      reinterpret_cast<const T*>(q), reinterpret_cast<const T*>(k), reinterpret_cast<const T*>(q_weight),
      reinterpret_cast<const T*>(k_weight), reinterpret_cast<const T*>(cos), reinterpret_cast<const T*>(sin),
      reinterpret_cast<const uint32_t*>(positions), reinterpret_cast<T*>(q_out), reinterpret_cast<T*>(k_out),
      q_stride_b, q_stride_h, q_stride_s, q_stride_d, k_stride_b, k_stride_h, k_stride_s, k_stride_d, batch, q_heads,
      k_heads, seq_len, head_dim, rot_dim, q_eps, k_eps);
}

#define QK_NORM_ROPE_ARGS                                                                                        \
  q, k, q_weight, k_weight, cos, sin, positions, q_out, k_out, q_stride_b, q_stride_h, q_stride_s, q_stride_d, \
      k_stride_b, k_stride_h, k_stride_s, k_stride_d, batch, q_heads, k_heads, seq_len, head_dim, rot_dim,     \
      q_eps, k_eps, stream

// q, k: strided views (element strides b, h, s, d); q_out [batch, q_heads, seq_len, head_dim], k_out [batch,
// k_heads, seq_len, head_dim]; positions uint32 [batch, seq_len]; cos, sin [max_pos, rot_dim]; device pointers.
extern "C" void qk_rms_norm_rope_positions(const void* q, const void* k, const void* q_weight, const void* k_weight,
                                           const void* cos, const void* sin, const void* positions, void* q_out,
                                           void* k_out, const int64_t q_stride_b, const int64_t q_stride_h,
                                           const int64_t q_stride_s, const int64_t q_stride_d,
                                           const int64_t k_stride_b, const int64_t k_stride_h,
                                           const int64_t k_stride_s, const int64_t k_stride_d, const int batch,
                                           const int q_heads, const int k_heads, const int seq_len,
                                           const int head_dim, const int rot_dim, const float q_eps,
                                           const float k_eps, const int is_neox, const int dtype, int64_t stream) {
  if (is_neox) {
    if (dtype == 0) {
      launch_qk_rms_norm_rope_positions<__half, true>(QK_NORM_ROPE_ARGS);
    } else if (dtype == 1) {
      launch_qk_rms_norm_rope_positions<__nv_bfloat16, true>(QK_NORM_ROPE_ARGS);
    } else if (dtype == 2) {
      launch_qk_rms_norm_rope_positions<float, true>(QK_NORM_ROPE_ARGS);
    }
  } else {
    if (dtype == 0) {
      launch_qk_rms_norm_rope_positions<__half, false>(QK_NORM_ROPE_ARGS);
    } else if (dtype == 1) {
      launch_qk_rms_norm_rope_positions<__nv_bfloat16, false>(QK_NORM_ROPE_ARGS);
    } else if (dtype == 2) {
      launch_qk_rms_norm_rope_positions<float, false>(QK_NORM_ROPE_ARGS);
    }
  }
}
