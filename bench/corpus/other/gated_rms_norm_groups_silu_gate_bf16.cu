// Gated RMSNorm of the Mamba-2 / Qwen3-Next linear-attention blocks (mamba_ssm's layernorm_gated RMSNormGated with
// norm_before_gate = False, group_size = hidden / ngroups), as a CUDA port of its one-pass Triton kernel: per row
// and per group of N channels, x is first gated by the second input z, x * z * sigmoid(z), then RMS-normalized over
// the group: rstd = 1 / sqrt(mean(g^2) + eps), y = g * rstd * w; rstd kept per (group, row) in Rstd [ngroups * M]
// (group-major, as the Triton kernel stores it). Storage bf16 for X, Z, Y and W; fp32 math, one rounding at the
// store; the gate recomputed in the second pass from re-read x and z. Row strides for X, Y and Z separately
// (stride_x_row, stride_y_row, stride_z_row) as the Triton kernel takes them. Launch: the Triton grid (M, ngroups),
// one block per (row, group) with Triton's warp count for BLOCK_N = next_pow2(N) (min(max(BLOCK_N / 256, 1), 8)
// warps); threads stride the group's columns; xor shuffles and a shared array of warp sums.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

constexpr int kMaxWarps = 8;

/* kerntune:
args  = ["X: in bf16[M * ngroups * N]", "Y: out bf16[M * ngroups * N]", "W: in bf16[ngroups * N]",
         "Z: in bf16[M * ngroups * N]", "Rstd: out f32[ngroups * M]", "stride_x_row: i64 = ngroups * N",
         "stride_y_row: i64 = ngroups * N", "stride_z_row: i64 = ngroups * N", "M: i32 = M", "N: i32 = N",
         "eps: f32 = 1e-6"]
sizes = [{ M = 8192, ngroups = 8, N = 512 }, { M = 4, ngroups = 16, N = 256 }, { M = 1001, ngroups = 4, N = 320 }]
grid  = ["M", "ngroups"]
block = "32 * (8 if N > 1024 else 4 if N > 512 else 2 if N > 256 else 1)"
*/
__global__ void gated_rms_norm_fwd_kernel(const __nv_bfloat16* X, __nv_bfloat16* Y, const __nv_bfloat16* W,
                                          const __nv_bfloat16* Z, float* Rstd, const int64_t stride_x_row,
                                          const int64_t stride_y_row, const int64_t stride_z_row, const int M,
                                          const int N, const float eps) {
  const int row = blockIdx.x;
  const int group = blockIdx.y;
  const __nv_bfloat16* x = X + row * stride_x_row + static_cast<int64_t>(group) * N;
  const __nv_bfloat16* z = Z + row * stride_z_row + static_cast<int64_t>(group) * N;
  __nv_bfloat16* y = Y + row * stride_y_row + static_cast<int64_t>(group) * N;
  const __nv_bfloat16* w = W + static_cast<int64_t>(group) * N;

  float sum_sq = 0.f;
  for (int col = threadIdx.x; col < N; col += blockDim.x) {
    const float zv = __bfloat162float(z[col]);
    const float g = __bfloat162float(x[col]) * (zv * (1.f / (1.f + expf(-zv))));
    sum_sq += g * g;
  }
  for (int offset = 16; offset > 0; offset >>= 1) sum_sq += __shfl_xor_sync(0xffffffff, sum_sq, offset);

  __shared__ float warp_sums[kMaxWarps];
  __shared__ float s_rstd;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = sum_sq;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int i = 0; i < static_cast<int>(blockDim.x / 32); ++i) total += warp_sums[i];
    const float var = total / N;
    const float rstd = 1.f / sqrtf(var + eps);
    s_rstd = rstd;
    Rstd[static_cast<int64_t>(group) * M + row] = rstd;
  }
  __syncthreads();
  const float rstd = s_rstd;

  for (int col = threadIdx.x; col < N; col += blockDim.x) {
    const float zv = __bfloat162float(z[col]);
    const float g = __bfloat162float(x[col]) * (zv * (1.f / (1.f + expf(-zv))));
    y[col] = __float2bfloat16(g * rstd * __bfloat162float(w[col]));
  }
}

static inline int next_power_of_2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Host side (_layer_norm_fwd with is_rms_norm and z given, norm_before_gate False): device pointers, x, z and y
// [M, ngroups * N] with the given row strides.
void gated_rms_norm_fwd(const __nv_bfloat16* x, const __nv_bfloat16* weight, const __nv_bfloat16* z, float eps,
                        __nv_bfloat16* out, float* rstd, int M, int hidden, int group_size, cudaStream_t stream) {
  const int ngroups = hidden / group_size;
  const int BLOCK_N = next_power_of_2(group_size);
  const int num_warps = std::min(std::max(BLOCK_N / 256, 1), kMaxWarps);
  const dim3 grid(M, ngroups);
  gated_rms_norm_fwd_kernel<<<grid, num_warps * 32, 0, stream>>>(x, out, weight, z, rstd, hidden, hidden, hidden, M,
                                                                 group_size, eps);
}
