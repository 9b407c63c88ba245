// LayerNorm over head-sized rows in the style of flash-linear-attention (fla-org/flash-linear-attention,
// fla/modules/layernorm.py: layer_norm_fwd_kernel, the D <= 512 path of layer_norm_fwd, behind GroupNorm /
// group_norm(..., num_groups); fla is the library of Triton kernels for linear-attention models, and its RWKV-7 layer
// (fla/layers/rwkv7.py) normalizes the attention output with GroupNorm(num_groups=num_heads,
// hidden_size=value_dim, bias=True, eps=head_dim * norm_eps), RWKV's ln_x), written as the CUDA port of that Triton
// program:
//   the [tokens, G * D] activations are reshaped by the host to T = tokens * G ROWS OF ONE HEAD (D = head_dim = 64)
//   and each row is layer-normalized on its own; the weight and the bias are [G * D] and row t uses group
//   o_g = t % G of them (w[o_g * D + d]); mean [T] and rstd [T] are fp32 outputs (saved for the backward pass).
//   One program per BT = 64 ROWS: grid cdiv(T, BT); the [BT, BD] tile (BD = next_pow2(D)) is loaded once through a
//   block pointer (zero-padded past T and D) into fp32 registers, mean = sum(x) / D, xbar = x - mean masked at D,
//   var = sum(xbar^2) / D, rstd = 1 / sqrt(var + eps), y = (x - mean) * rstd * w + b (the multiply-add fused as Triton
//   fuses it), one rounding at the store.
//   fla autotunes BT in {32, 64, 128} with 2, 4 or 8 warps (keyed on D): fixed here at BT = 64 with 4 warps
//   (template <T, BT, BD, NUM_WARPS>, spec = <__nv_bfloat16, 64, 64, 4>). Thread layout of Triton's blocked layout for
//   a [64, 64] bf16 tile over 4 warps: 8 lanes per row (8 contiguous columns each, one 16-byte access), 4 rows per
//   warp, 16 rows per repetition, 4 repetitions per thread; the row sums are xor shuffles inside the 8-lane group.
//   Triton's tl.sqrt is sqrt.approx and its '/' div.full: IEEE here (well inside the tolerance).
// No bug found. Changed: the other configurations of the autotuner are not ported (one fixed config), nor the
// residual / prenorm / RMS / no-weight variants (constexprs false / true as GroupNorm calls it) nor the D > 512 kernel
// (layer_norm_fwd_kernel1, one row per program) and BD = 512 (a row wider than a warp's 32 x 8 columns); the Python
// wrapper became a C++ launcher with device pointers, sizes and a stream.
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace fla {

constexpr int kBT = 64;       // the autotuner's BT, fixed
constexpr int kNumWarps = 4;  // and its num_warps

template <typename scalar_t>
__device__ __forceinline__ void load8(const scalar_t* p, int64_t row_off, int col, int D, bool row_ok, bool vec_ok,
                                      float (&v)[8]) {
  if (row_ok && vec_ok && col + 8 <= D) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p + row_off + col);
    const scalar_t* e = reinterpret_cast<const scalar_t*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = static_cast<float>(e[j]);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = (row_ok && col + j < D) ? static_cast<float>(p[row_off + col + j]) : 0.0f;
  }
}

/* kerntune:
args  = ["x: in bf16[tokens * G * 64]", "y: out bf16[tokens * G * 64]", "w: in bf16[G * 64]", "b: in bf16[G * 64]",
         "mean: out f32[tokens * G]", "rstd: out f32[tokens * G]", "eps: f32 = 6.4e-4", "T: i32 = tokens * G",
         "G: i32 = G", "D: i32 = 64"]
sizes = [{ tokens = 8192, G = 64 }, { tokens = 4, G = 64 }, { tokens = 999, G = 40 }]
grid  = "cdiv(tokens * G, 64)"
block = 128
template_args = ["__nv_bfloat16", "64", "64", "4"]
*/
template <typename scalar_t, int BT, int BD, int NUM_WARPS>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    layer_norm_fwd_kernel(const scalar_t* x, scalar_t* y, const scalar_t* w, const scalar_t* b, float* mean,
                          float* rstd, float eps, int T, int G, int D) {
  constexpr int VEC = 8;                         // columns per lane (16 bytes of bf16)
  constexpr int LANES_PER_ROW = BD / VEC;        // lanes sharing a row
  constexpr int ROWS_PER_WARP = 32 / LANES_PER_ROW;
  constexpr int ROWS_PER_REP = ROWS_PER_WARP * NUM_WARPS;
  constexpr int REPS = BT / ROWS_PER_REP;        // rows of the tile each thread holds
  static_assert(LANES_PER_ROW >= 1 && LANES_PER_ROW <= 32, "a row within one warp");
  static_assert(REPS >= 1 && REPS * ROWS_PER_REP == BT, "the tile covers whole repetitions");

  const int i_t = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int row_in_rep = warp * ROWS_PER_WARP + lane / LANES_PER_ROW;
  const int col = (lane % LANES_PER_ROW) * VEC;
  const bool vec_ok = (D % VEC) == 0 &&
                      ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                        reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(b)) & 15) == 0;

#pragma unroll
  for (int rep = 0; rep < REPS; ++rep) {
    const int o_t = i_t * BT + rep * ROWS_PER_REP + row_in_rep;
    const bool row_ok = o_t < T;
    const int64_t row_off = (int64_t)o_t * D;

    float b_x[VEC];
    load8(x, row_off, col, D, row_ok, vec_ok, b_x);

    // b_mean = tl.sum(b_x, axis=1) / D
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) s += b_x[j];
#pragma unroll
    for (int o = LANES_PER_ROW / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float b_mean = s / D;

    // b_xbar = where(m_d, b_x - b_mean, 0); b_var = tl.sum(b_xbar * b_xbar, axis=1) / D
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float xbar = col + j < D ? b_x[j] - b_mean : 0.0f;
      ss += xbar * xbar;
    }
#pragma unroll
    for (int o = LANES_PER_ROW / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float b_var = ss / D;
    const float b_rstd = 1.0f / sqrtf(b_var + eps);

    if (!row_ok) continue;  // boundary_check: nothing is stored past T
    if (lane % LANES_PER_ROW == 0) {
      mean[o_t] = b_mean;
      rstd[o_t] = b_rstd;
    }

    // the weight and bias of group o_g = o_t % G
    const int64_t g_off = (int64_t)(o_t % G) * D;
    float b_w[VEC], b_b[VEC];
    load8(w, g_off, col, D, true, vec_ok, b_w);
    load8(b, g_off, col, D, true, vec_ok, b_b);

    alignas(16) scalar_t out[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float b_x_hat = (b_x[j] - b_mean) * b_rstd;
      out[j] = scalar_t(fmaf(b_x_hat, b_w[j], b_b[j]));
    }
    if (vec_ok && col + VEC <= D) {
      *reinterpret_cast<uint4*>(y + row_off + col) = *reinterpret_cast<const uint4*>(out);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (col + j < D) y[row_off + col + j] = out[j];
    }
  }
}

template <typename scalar_t, int BD>
static void launch_fwd(const scalar_t* x, scalar_t* y, const scalar_t* w, const scalar_t* b, float* mean, float* rstd,
                       float eps, int T, int G, int D, cudaStream_t stream) {
  const dim3 grid((T + kBT - 1) / kBT);
  layer_norm_fwd_kernel<scalar_t, kBT, BD, kNumWarps><<<grid, kNumWarps * 32, 0, stream>>>(x, y, w, b, mean, rstd,
                                                                                           eps, T, G, D);
}

static int next_power_of_2(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace fla

// group_norm(x, weight, bias, eps, num_groups) forward: x device [rows, hidden] (contiguous), weight and bias
// [hidden], y [rows, hidden]; mean and rstd [rows * num_groups] fp32. Each token's hidden vector is cut into
// num_groups groups of hidden / num_groups channels, each normalized on its own.
template <typename scalar_t>
void group_norm_fwd(const scalar_t* x, const scalar_t* weight, const scalar_t* bias, scalar_t* y, float* mean,
                    float* rstd, float eps, int64_t rows, int hidden, int num_groups, cudaStream_t stream) {
  assert(hidden % num_groups == 0);
  const int D = hidden / num_groups;     // x.reshape(-1, hidden // num_groups)
  const int64_t T64 = rows * num_groups;
  assert(T64 < (int64_t)1 << 31);
  const int T = (int)T64, G = num_groups;
  if (T == 0) return;
  int BD = fla::next_power_of_2(D);      // min(MAX_FUSED_SIZE, next_power_of_2(D))
  if (BD < 16) BD = 16;                  // (tiles below 16 columns padded)
  switch (BD) {
    case 16: fla::launch_fwd<scalar_t, 16>(x, y, weight, bias, mean, rstd, eps, T, G, D, stream); break;
    case 32: fla::launch_fwd<scalar_t, 32>(x, y, weight, bias, mean, rstd, eps, T, G, D, stream); break;
    case 64: fla::launch_fwd<scalar_t, 64>(x, y, weight, bias, mean, rstd, eps, T, G, D, stream); break;
    case 128: fla::launch_fwd<scalar_t, 128>(x, y, weight, bias, mean, rstd, eps, T, G, D, stream); break;
    case 256: fla::launch_fwd<scalar_t, 256>(x, y, weight, bias, mean, rstd, eps, T, G, D, stream); break;
    default: assert(false && "D > 256: the one-row-per-program kernel is not ported");
  }
}

template void group_norm_fwd<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                                            __nv_bfloat16*, float*, float*, float, int64_t, int, int, cudaStream_t);
template void group_norm_fwd<__half>(const __half*, const __half*, const __half*, __half*, float*, float*, float,
                                     int64_t, int, int, cudaStream_t);
