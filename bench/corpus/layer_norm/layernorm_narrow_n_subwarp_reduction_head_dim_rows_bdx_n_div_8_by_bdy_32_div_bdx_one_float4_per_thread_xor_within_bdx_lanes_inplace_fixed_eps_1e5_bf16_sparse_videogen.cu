// Narrow LayerNorm as Sparse-VideoGen writes it (svg-project/Sparse-VideoGen, svg/kernels/include/norm/
// narrow_layer_norm.cuh layernorm_narrow_n_subwarp_reduction behind narrow_layernorm_inplace; the per-head QK
// LayerNorm of video diffusion transformers, applied over head_dim). data [m, n] with n = head_dim in
// {32, 64, 128, 256}, IN PLACE, gamma and beta [n] in the storage type. Every thread owns exactly ONE 16-byte float4
// of the row (8 bf16), so a row is bdx = n / 8 lanes of a warp and a block (bdx, bdy) with bdy = 32 / bdx folds
// 32 / bdx rows into a single warp: block (16, 2) and grid ceil(m / 2) for n = 128. No shared memory and no
// inter-warp step: the sum is reduced with __shfl_xor_sync over offsets bdx / 2 .. 1 (which stays inside each
// row's group of bdx lanes), s_mean = sum / n; the centred sum of squares is reduced the same way (two-pass
// variance over the registers), s_variance = rsqrtf(var / n + 1e-5) with the 1e-5 hard-coded; y = (x - mean) *
// rstd * gamma + beta in fp32 and rounded once to bf16, stored as one float4. Rows past m (the last block of an odd
// m) keep their lanes in the shuffles with a zero contribution and do not store. Template <T, bdx, bdy> chosen by a
// SWITCH_HEAD_DIM macro on the host. Argument order (data, gamma, beta, m, n).
// Fixed: lanes of rows past m left their float4 uninitialized and then converted it (the value was discarded but
// the read is undefined), now zero-initialized; the row offset cur_m * n is formed in 64 bits. Changed: the
// cutlass::MatrixCoord size argument replaced by (m, n); `#pragma UNROLL` (ignored by nvcc) spelled as
// `#pragma unroll`. Sizes: 786432 x 128 (32768 video tokens x 24 heads), decode 96 x 128, 9999 x 128 (odd m).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <stdexcept>
#include <string>

#define FINAL_MASK 0xffffffff

#define SWITCH_HEAD_DIM(head_dim, HEAD_DIM, ...)                                        \
  if (head_dim == 32) {                                                                 \
    constexpr size_t HEAD_DIM = 32;                                                     \
    __VA_ARGS__                                                                         \
  } else if (head_dim == 64) {                                                          \
    constexpr size_t HEAD_DIM = 64;                                                     \
    __VA_ARGS__                                                                         \
  } else if (head_dim == 128) {                                                         \
    constexpr size_t HEAD_DIM = 128;                                                    \
    __VA_ARGS__                                                                         \
  } else if (head_dim == 256) {                                                         \
    constexpr size_t HEAD_DIM = 256;                                                    \
    __VA_ARGS__                                                                         \
  } else {                                                                              \
    throw std::invalid_argument("Unsupported head_dim: " + std::to_string(head_dim)); \
  }

/*
 * sub-warp reduce layernorm
 * T: data type (all loads / stores are one float4)
 * bdx: blockDim.x, lanes per row (1 <= bdx <= 32, a power of two)
 * bdy: rows folded into the warp
 */
/* kerntune:
args  = ["data: inout bf16[m * n]", "gamma: in bf16[n]", "beta: in bf16[n]", "m: i32 = m", "n: i32 = n"]
sizes = [{ m = 786432, n = 128 }, { m = 96, n = 128 }, { m = 9999, n = 128 }]
grid  = "cdiv(m, 2)"
block = [16, 2]
template_args = ["__nv_bfloat16", "16", "2"]
*/
template <typename T, int bdx, int bdy>
__global__ void layernorm_narrow_n_subwarp_reduction(T* data, const T* gamma, const T* beta, const int m,
                                                     const int n) {
  // input [m, n], gridDim ((m + bdy - 1) / bdy), blockDim (bdx, bdy)
  const int cur_m = blockIdx.x * bdy + threadIdx.y;
  const int tid = threadIdx.x;
  T* input = data + static_cast<int64_t>(cur_m) * n;
  T* output = input;

  // no inter-warp communication: everything stays in registers
  float s_mean, s_variance, local_sum = 0.0f;
  float4 local_val[1] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
  const float4* vectorized_input = reinterpret_cast<const float4*>(input);
  float4* vectorized_output = reinterpret_cast<float4*>(output);
  const float4* vectorized_gamma = reinterpret_cast<const float4*>(gamma);
  const float4* vectorized_beta = reinterpret_cast<const float4*>(beta);

  if (cur_m < m) {
    local_val[0] = vectorized_input[tid];
  }

  T* extracted_local_val = reinterpret_cast<T*>(local_val);
  constexpr int NUM_T_VECTORIZED = sizeof(float4) / sizeof(T);
#pragma unroll
  for (int i = 0; i < NUM_T_VECTORIZED; i += 1) {
    local_sum += static_cast<float>(extracted_local_val[i]);
  }
  local_sum = cur_m < m ? local_sum : 0.0f;

#pragma unroll
  for (int i = bdx / 2; i > 0; i >>= 1) {
    local_sum += __shfl_xor_sync(FINAL_MASK, local_sum, i);
  }
  s_mean = local_sum / n;
  local_sum = 0.0f;

#pragma unroll
  for (int i = 0; i < NUM_T_VECTORIZED; i += 1) {
    local_sum += (static_cast<float>(extracted_local_val[i]) - s_mean) *
                 (static_cast<float>(extracted_local_val[i]) - s_mean);
  }
  local_sum = cur_m < m ? local_sum : 0.0f;

#pragma unroll
  for (int i = bdx / 2; i > 0; i >>= 1) {
    local_sum += __shfl_xor_sync(FINAL_MASK, local_sum, i);
  }
  s_variance = rsqrtf(local_sum / n + 1e-5f);

  float4 local_gamma[1] = {vectorized_gamma[tid]}, local_beta[1] = {vectorized_beta[tid]};
  T* extracted_local_gamma = reinterpret_cast<T*>(local_gamma);
  T* extracted_local_beta = reinterpret_cast<T*>(local_beta);
#pragma unroll
  for (int i = 0; i < NUM_T_VECTORIZED; i += 1) {
    float tmp = (static_cast<float>(extracted_local_val[i]) - s_mean) * s_variance *
                    static_cast<float>(extracted_local_gamma[i]) +
                static_cast<float>(extracted_local_beta[i]);
    extracted_local_val[i] = static_cast<T>(tmp);
  }

  if (cur_m < m) {
    vectorized_output[tid] = local_val[0];
  }
}

// data [m, n] normalized in place over n (n = head_dim: 32, 64, 128 or 256), gamma / beta [n].
template <typename T>
void narrow_layernorm_inplace(int m, int n, T* data, const T* gamma, const T* beta, cudaStream_t stream) {
  constexpr int NUM_T_VECTORIZED = sizeof(float4) / sizeof(T);
  SWITCH_HEAD_DIM(n, HEAD_DIM, {
    static_assert(HEAD_DIM % NUM_T_VECTORIZED == 0, "n should be multiple of NUM_T_VECTORIZED");
    constexpr int bdx = HEAD_DIM / NUM_T_VECTORIZED;
    constexpr int bdy = 32 / bdx;
    static_assert((bdx > 0) && ((bdx & (bdx - 1)) == 0), "bdx should be power of 2");

    dim3 block(bdx, bdy);
    dim3 grid((m + bdy - 1) / bdy);
    layernorm_narrow_n_subwarp_reduction<T, bdx, bdy><<<grid, block, 0, stream>>>(data, gamma, beta, m, n);
  });
}

template void narrow_layernorm_inplace<__nv_bfloat16>(int, int, __nv_bfloat16*, const __nv_bfloat16*,
                                                      const __nv_bfloat16*, cudaStream_t);
