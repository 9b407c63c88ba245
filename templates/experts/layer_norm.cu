/* kerntune-expert:
name = "layer_norm"
family = "layer_norm"
description = "LayerNorm over rows: out = (x - mean) * rsqrt(var + eps) * gamma + beta, mean and variance from the row kept in registers (one pass over memory, exact two-step variance), gamma and beta loaded before the reductions or where they are used (WLOAD), 16-byte loads (the vector and scalar paths compiled apart), warp-shuffle block reductions."
function = "kt::layer_norm"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "gamma: in W[hidden]", "beta: in W[hidden]", "eps: f32", "rows: i32", "hidden: i32"]
helpers = ["_rows.cuh"]
constraints = ["VEC * ESIZE <= 16", "THREADS * VEC * ITEMS >= hidden", "THREADS * ROWS <= 1024", "THREADS * ROWS >= 32"]

[params.THREADS]
values = [32, 64, 128, 256, 512, 1024]
default = 256
kind = "block_size"
why = "most threads per row: the launch gives each row min(THREADS, ceil(hidden / (VEC * ITEMS)) rounded up to a warp) threads, so one configuration fits short and long rows; the row is reduced over them (warp shuffles, then the warps' partials through shared memory)"

[params.ROWS]
values = [1, 2, 4, 8]
default = 1
kind = "rows_per_block"
why = "rows per block (blockDim.y): more work per block for short rows"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load/store: 16 bytes at most; the kernel falls back to scalar accesses when the row or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4, 8, 16]
default = 8
kind = "items_per_thread"
why = "vectors each thread keeps in registers (the row is spread over just enough threads to give each this many; THREADS * VEC * ITEMS must cover the row); a row that needs fewer uses the fewest that cover it"

[params.WLOAD]
values = [0, 1]
default = 0
kind = "load_order"
why = "1: gamma and beta read right after the row, their latency hidden under the two reductions, at the cost of registers held through them; 0: read where they are used (fewer registers, more rows in flight: 16-bit rows of 4096 on the H100 went from 77% to 90% of copy bandwidth)"

[launch]
grid = ["cdiv(rows, ROWS)"]
block = ["min(THREADS, round_up(cdiv(hidden, VEC * ITEMS), 32))", "ROWS"]
bounds = "THREADS * ROWS"
smem = "0"
*/
// kt:bind KT_EXPERT_EPS_INSIDE = 1  (1: rsqrt(var + eps), 0: 1 / (sqrt(var) + eps))
// kt:bind KT_EXPERT_STATS = 0  (1: also writes each row's mean and 1 / sqrt(var + eps) (fp32), as training kernels do)
// kt:bind KT_EXPERT_AFFINE = 1  (1: times gamma plus beta; 0: neither (llama.cpp's norm: gamma and beta are not read); 2: times gamma, no beta (OLMo / StableLM bias=False: beta is not read))
// kt:bind KT_EXPERT_OUT_TYPE = 0  (0: out of x's type; 1: of a type of its own, O (fp32 activations in, bf16 out))
// kt:bind KT_EXPERT_RESIDUAL = 0  (no statistics outputs; 0: x normalized as read; 1: the add form: z = x + residual (+ bias, KT_EXPERT_BIAS) rounded to x's type T, stored back in `residual` (of type T, the argument after hidden), the LayerNorm of z written to out (out may be x: normalized in place; FasterTransformer / TensorRT-LLM add-bias-residual LayerNorm); 2: as 1, but the mean from the unrounded fp32 sums (accumulated before the store rounds them, as FasterTransformer's first pass does), the variance and the normalized row from the rounded z)
// kt:bind KT_EXPERT_RESIDUAL_IN = 0  (with KT_EXPERT_RESIDUAL only; 0: the residual read and the sum stored back in it; 1: the residual read from `residual_in` (of type T, the argument after `bias`) and the sum stored to `residual` unless it is null (ONNX Runtime's SkipLayerNorm sum output, TensorRT-LLM's residual out))
// kt:bind KT_EXPERT_BIAS = 0  (with KT_EXPERT_RESIDUAL only; 0: no bias (the call passes a null `bias`); 1: a bias [hidden] of type T (the argument after `residual`; null adds nothing) added in fp32 with the one rounding: (x + residual) + bias; 2: each add rounded to T: T(T(x + residual) + bias))
// kt:bind KT_EXPERT_STATS_VAR = 0  (with KT_EXPERT_STATS only; 0: the second statistic (rstd_out) is the reciprocal the row is multiplied by, 1 / sqrt(var + eps); 1: the variance itself, var, without eps (PaddlePaddle's layer_norm writes mean and var))
// kt:bind KT_EXPERT_STATS_PAIR = 0  (with KT_EXPERT_STATS only; 0: the mean and the second statistic each an array of one value a row; 1: one array of a (mean, statistic) pair a row, [rows, 2] (haste's cache for the backward pass): mean_out = the array, rstd_out = the array + 1, both at 2 * row)
// kt:bind KT_EXPERT_VAR_ONEPASS = 0  (0: the variance from the row less its mean, mean((x - mean)^2); 1: from one pass of sums, mean(x^2) - mean^2 (in fp32, the mean squared subtracted last, as PaddlePaddle's and Apex's one-pass kernels do))
// kt:bind KT_EXPERT_WEIGHT_OFFSET = 0  (no residual; 0: gamma as stored; 1: gamma plus the last argument w_offset, in fp32 (Transformer Engine's zero_centered_gamma bound as flag ? 1 : 0, Megatron's LayerNorm1P: gamma stored as its offset from 1))
#ifndef KT_THREADS
#define KT_THREADS 256
#endif
#ifndef KT_ROWS
#define KT_ROWS 1
#endif
#ifndef KT_VEC
#define KT_VEC 8
#endif
#ifndef KT_ITEMS
#define KT_ITEMS 8
#endif
#ifndef KT_WLOAD
#define KT_WLOAD 0
#endif

namespace kt {

// gamma and beta as stored (W, not yet float), with KT_WLOAD: loaded right after the row, so their latency passes
// under the row's two reductions (on the H100 this took fp32 LayerNorm from 1.31x to 1.42x over the bench shapes),
// converted where they are used. Same element layout as row_load. Without: read where they are used.
template <int VEC, int ITEMS, int P, typename T>
__device__ __forceinline__ void row_load_raw(const T* __restrict__ r, int n, Vec<T, VEC> (&raw)[ITEMS], int lead) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if constexpr (P == 1) {
      const int e = row_elem<0, VEC, ITEMS>(true, i, 0);
      if (e < n) {
        raw[i] = *reinterpret_cast<const Vec<T, VEC>*>(r + e);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) raw[i].v[j] = from_f<T>(0.f);
      }
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int e = rows_elem<0, VEC, ITEMS, P>(i, j, lead);  // peeled: columns shifted, not aligned
        raw[i].v[j] = rows_in(e, n) ? r[e] : from_f<T>(0.f);
      }
    }
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void raw_item(const Vec<T, VEC>& raw, float (&out)[VEC]) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = to_f(raw.v[j]);
}

#if KT_EXPERT_STATS  // kt:bind
// P: the row path (scalar, vector, peeled: _rows.cuh), each compiled apart.
#if KT_EXPERT_OUT_TYPE  // kt:bind
template <int IT, int P, typename T, typename W, typename O>
__device__ __forceinline__ void layer_norm_impl(O* __restrict__ out, const T* __restrict__ x,
#else  // kt:bind
template <int IT, int P, typename T, typename W>
__device__ __forceinline__ void layer_norm_impl(T* __restrict__ out, const T* __restrict__ x,
#endif  // kt:bind
                                           const W* __restrict__ gamma, const W* __restrict__ beta, float eps,
                                           int rows, int hidden, float* __restrict__ mean_out,
#if KT_EXPERT_WEIGHT_OFFSET  // kt:bind
                                           float* __restrict__ rstd_out, float w_offset) {
#else  // kt:bind
                                           float* __restrict__ rstd_out) {
#endif  // kt:bind
#else  // kt:bind
// P: the row path (scalar, vector, peeled: _rows.cuh), each compiled apart.
#if KT_EXPERT_OUT_TYPE  // kt:bind
template <int IT, int P, typename T, typename W, typename O>
__device__ __forceinline__ void layer_norm_impl(O* __restrict__ out, const T* __restrict__ x,
#else  // kt:bind
template <int IT, int P, typename T, typename W>
__device__ __forceinline__ void layer_norm_impl(T* __restrict__ out, const T* __restrict__ x,
#endif  // kt:bind
                                           const W* __restrict__ gamma, const W* __restrict__ beta, float eps,
#if KT_EXPERT_RESIDUAL_IN  // kt:bind
                                           int rows, int hidden, T* __restrict__ residual,
                                           const T* __restrict__ bias, const T* __restrict__ residual_in) {
#elif KT_EXPERT_RESIDUAL  // kt:bind
                                           int rows, int hidden, T* __restrict__ residual,
                                           const T* __restrict__ bias) {
#else  // kt:bind
#if KT_EXPERT_WEIGHT_OFFSET  // kt:bind
                                           int rows, int hidden, float w_offset) {
#else  // kt:bind
                                           int rows, int hidden) {
#endif  // kt:bind
#endif  // kt:bind
#endif  // kt:bind
  const int row = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = row < rows;
  const long long off = (long long)(active ? row : 0) * hidden;
  const int lead = rows_lead<P, KT_VEC>(off);
  float v[IT][KT_VEC];
  rows_load<0, KT_VEC, IT, P>(x + off, hidden, v, lead);
#if KT_EXPERT_RESIDUAL == 2  // kt:bind
  float su = 0.f;  // the sums before they are rounded: the mean's
#endif  // kt:bind
#if KT_EXPERT_RESIDUAL  // kt:bind
  // the add form: z = x + residual (+ bias) rounded to T, stored in the residual, then normalized
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    float r[KT_VEC];
#if KT_EXPERT_RESIDUAL_IN  // kt:bind
    rows_load_item<0, KT_VEC, IT, P>(residual_in + off, hidden, i, r, lead);
#else  // kt:bind
    rows_load_item<0, KT_VEC, IT, P>(residual + off, hidden, i, r, lead);
#endif  // kt:bind
#if KT_EXPERT_BIAS  // kt:bind
    float b[KT_VEC];  // indexed by column as gamma is (null: nothing added)
    if (bias != nullptr) {
      rows_weight_item<0, KT_VEC, IT, P>(bias, hidden, i, b, lead);
    } else {
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) b[j] = 0.f;
    }
#endif  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
#if KT_EXPERT_BIAS == 1  // kt:bind
      const float u = v[i][j] + r[j] + b[j];
#elif KT_EXPERT_BIAS == 2  // kt:bind
      const float u = round_t<T>(v[i][j] + r[j]) + b[j];
#else  // kt:bind
      const float u = v[i][j] + r[j];
#endif  // kt:bind
#if KT_EXPERT_RESIDUAL == 2  // kt:bind
      su += u;
#endif  // kt:bind
      v[i][j] = round_t<T>(u);
    }
  }
#if KT_EXPERT_RESIDUAL_IN  // kt:bind
  if (active && residual != nullptr) rows_store<0, KT_VEC, IT, P>(residual + off, hidden, v, lead);
#else  // kt:bind
  if (active) rows_store<0, KT_VEC, IT, P>(residual + off, hidden, v, lead);
#endif  // kt:bind
#endif  // kt:bind
  Vec<W, KT_VEC> gr[KT_WLOAD ? IT : 1], br[KT_WLOAD ? IT : 1];  // gamma and beta, in flight while the row is reduced
#if KT_EXPERT_AFFINE == 2  // kt:bind
  if constexpr (KT_WLOAD != 0) row_load_raw<KT_VEC, IT, P>(gamma, hidden, gr, lead);
#elif KT_EXPERT_AFFINE  // kt:bind
  if constexpr (KT_WLOAD != 0) {
    row_load_raw<KT_VEC, IT, P>(gamma, hidden, gr, lead);
    row_load_raw<KT_VEC, IT, P>(beta, hidden, br, lead);
  }
#endif  // kt:bind
#if KT_EXPERT_RESIDUAL == 2  // kt:bind
  const float s = su;
#else  // kt:bind
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) s += v[i][j];
#endif  // kt:bind
  const float mean = row_reduce<0, KT_ROWS, 0>(s, Sum(), 0.f) / (float)hidden;
#if KT_EXPERT_VAR_ONEPASS  // kt:bind
  float q = 0.f;  // the sum of squares (the padding is 0)
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) q += v[i][j] * v[i][j];
  const float var = row_reduce<0, KT_ROWS, 1>(q, Sum(), 0.f) / (float)hidden - mean * mean;
#else  // kt:bind
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
      const float d = rows_in(rows_elem<0, KT_VEC, IT, P>(i, j, lead), hidden) ? v[i][j] - mean : 0.f;
      q += d * d;
    }
  const float var = row_reduce<0, KT_ROWS, 1>(q, Sum(), 0.f) / (float)hidden;
#endif  // kt:bind
#if KT_EXPERT_EPS_INSIDE == 0  // kt:bind
  const float inv = 1.f / (sqrtf(var) + eps);
#else  // kt:bind
  const float inv = rsqrtf(var + eps);
#endif  // kt:bind
#pragma unroll
  for (int i = 0; i < IT; ++i) {
#if KT_EXPERT_AFFINE == 0  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = (v[i][j] - mean) * inv;
#elif KT_EXPERT_AFFINE == 2  // kt:bind
    float g[KT_VEC];
    if constexpr (KT_WLOAD != 0) {
      raw_item<W, KT_VEC>(gr[i], g);
    } else {
      rows_weight_item<0, KT_VEC, IT, P>(gamma, hidden, i, g, lead);
    }
#if KT_EXPERT_WEIGHT_OFFSET  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) g[j] += w_offset;
#endif  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = (v[i][j] - mean) * inv * g[j];
#else  // kt:bind
    float g[KT_VEC], b[KT_VEC];
    if constexpr (KT_WLOAD != 0) {
      raw_item<W, KT_VEC>(gr[i], g);
      raw_item<W, KT_VEC>(br[i], b);
    } else {
      rows_weight_item<0, KT_VEC, IT, P>(gamma, hidden, i, g, lead);
      rows_weight_item<0, KT_VEC, IT, P>(beta, hidden, i, b, lead);
    }
#if KT_EXPERT_WEIGHT_OFFSET  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) g[j] += w_offset;
#endif  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = (v[i][j] - mean) * inv * g[j] + b[j];
#endif  // kt:bind
  }
  if (active) rows_store<0, KT_VEC, IT, P>(out + off, hidden, v, lead);
#if KT_EXPERT_STATS  // kt:bind
  if (active && threadIdx.x == 0) {
#if KT_EXPERT_STATS_PAIR  // kt:bind
    const long long at = 2LL * row;  // the two statistics side by side, a pair a row
#else  // kt:bind
    const long long at = row;
#endif  // kt:bind
    mean_out[at] = mean;
#if KT_EXPERT_STATS_VAR  // kt:bind
    rstd_out[at] = var;  // the variance itself
#else  // kt:bind
    rstd_out[at] = inv;
#endif  // kt:bind
  }
#endif  // kt:bind
}

#if KT_EXPERT_STATS  // kt:bind
#if KT_EXPERT_OUT_TYPE  // kt:bind
template <typename T, typename W, typename O>
__device__ __forceinline__ void layer_norm(O* out, const T* x, const W* gamma, const W* beta, float eps, int rows,
#if KT_EXPERT_WEIGHT_OFFSET  // kt:bind
                                           int hidden, float* mean_out, float* rstd_out, float w_offset) {
#else  // kt:bind
                                           int hidden, float* mean_out, float* rstd_out) {
#endif  // kt:bind
#else  // kt:bind
template <typename T, typename W>
__device__ __forceinline__ void layer_norm(T* out, const T* x, const W* gamma, const W* beta, float eps, int rows,
#if KT_EXPERT_WEIGHT_OFFSET  // kt:bind
                                           int hidden, float* mean_out, float* rstd_out, float w_offset) {
#else  // kt:bind
                                           int hidden, float* mean_out, float* rstd_out) {
#endif  // kt:bind
#endif  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x, out) && vec_ok<W, KT_VEC>(hidden, gamma, beta)),
                  (vec_ok<T, KT_VEC>(0, x, out)),
#if KT_EXPERT_WEIGHT_OFFSET  // kt:bind
                  (layer_norm_impl<IT, P, T, W>(out, x, gamma, beta, eps, rows, hidden, mean_out, rstd_out, w_offset)));
#else  // kt:bind
                  (layer_norm_impl<IT, P, T, W>(out, x, gamma, beta, eps, rows, hidden, mean_out, rstd_out)));
#endif  // kt:bind
}
#elif KT_EXPERT_RESIDUAL  // kt:bind
// the add form: out = LayerNorm(z), z = x + residual (+ bias) rounded to T and stored back in residual; out may be x
// (normalized in place: the row is in registers before out is written).
#if KT_EXPERT_OUT_TYPE  // kt:bind
template <typename T, typename W, typename O>
__device__ __forceinline__ void layer_norm(O* out, const T* x, const W* gamma, const W* beta, float eps, int rows,
#else  // kt:bind
template <typename T, typename W>
__device__ __forceinline__ void layer_norm(T* out, const T* x, const W* gamma, const W* beta, float eps, int rows,
#endif  // kt:bind
#if KT_EXPERT_RESIDUAL_IN  // kt:bind
                                           int hidden, T* residual, const T* bias, const T* residual_in) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x, out, residual, bias) && vec_ok<T, KT_VEC>(hidden, residual_in) &&
                   vec_ok<W, KT_VEC>(hidden, gamma, beta)),
                  (vec_ok<T, KT_VEC>(0, x, out, residual, residual_in)),
                  (layer_norm_impl<IT, P, T, W>(out, x, gamma, beta, eps, rows, hidden, residual, bias, residual_in)));
#else  // kt:bind
                                           int hidden, T* residual, const T* bias) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x, out, residual, bias) && vec_ok<W, KT_VEC>(hidden, gamma, beta)),
                  (vec_ok<T, KT_VEC>(0, x, out, residual)),
                  (layer_norm_impl<IT, P, T, W>(out, x, gamma, beta, eps, rows, hidden, residual, bias)));
#endif  // kt:bind
}
#else  // kt:bind
#if KT_EXPERT_OUT_TYPE  // kt:bind
template <typename T, typename W, typename O>
#if KT_EXPERT_WEIGHT_OFFSET  // kt:bind
__device__ __forceinline__ void layer_norm(O* out, const T* x, const W* gamma, const W* beta, float eps, int rows, int hidden,
                                           float w_offset) {
#else  // kt:bind
__device__ __forceinline__ void layer_norm(O* out, const T* x, const W* gamma, const W* beta, float eps, int rows, int hidden) {
#endif  // kt:bind
#else  // kt:bind
template <typename T, typename W>
#if KT_EXPERT_WEIGHT_OFFSET  // kt:bind
__device__ __forceinline__ void layer_norm(T* out, const T* x, const W* gamma, const W* beta, float eps, int rows, int hidden,
                                           float w_offset) {
#else  // kt:bind
__device__ __forceinline__ void layer_norm(T* out, const T* x, const W* gamma, const W* beta, float eps, int rows, int hidden) {
#endif  // kt:bind
#endif  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x, out) && vec_ok<W, KT_VEC>(hidden, gamma, beta)),
                  (vec_ok<T, KT_VEC>(0, x, out)),
#if KT_EXPERT_WEIGHT_OFFSET  // kt:bind
                  (layer_norm_impl<IT, P, T, W>(out, x, gamma, beta, eps, rows, hidden, w_offset)));
#else  // kt:bind
                  (layer_norm_impl<IT, P, T, W>(out, x, gamma, beta, eps, rows, hidden)));
#endif  // kt:bind
}
#endif  // kt:bind

}  // namespace kt
