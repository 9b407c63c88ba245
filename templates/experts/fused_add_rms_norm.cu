/* kerntune-expert:
name = "fused_add_rms_norm"
family = "fused_add_rms_norm"
description = "Fused residual add + RMSNorm: z = (T)(x + residual); residual = z; x = (T)(z * rsqrt(mean(z^2) + eps)) * w. Both buffers are written. One pass over memory (rows in registers), 16-byte loads, warp-shuffle block reduction."
function = "kt::fused_add_rms_norm"
roles = ["x: inout T[rows * hidden]", "residual: inout T[rows * hidden]", "w: in W[hidden]", "eps: f32", "rows: i32", "hidden: i32"]
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
why = "elements per load/store: 16 bytes at most; scalar fallback when the row or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4, 8, 16]
default = 8
kind = "items_per_thread"
why = "vectors each thread keeps in registers (the row is spread over just enough threads to give each this many; THREADS * VEC * ITEMS must cover the row); a row that needs fewer uses the fewest that cover it"

[launch]
grid = ["cdiv(rows, ROWS)"]
block = ["min(THREADS, round_up(cdiv(hidden, VEC * ITEMS), 32))", "ROWS"]
bounds = "THREADS * ROWS"
smem = "0"
*/
// kt:bind KT_EXPERT_EPS_INSIDE = 1  (1: rsqrt(mean(x^2) + eps), 0: 1 / (sqrt(mean(x^2)) + eps))
// kt:bind KT_EXPERT_ROUND_BEFORE_WEIGHT = 1  (1: the normalized value rounded to T, then times the weight; 0: times the weight in fp32, rounded once)
// kt:bind KT_EXPERT_WEIGHT_OFFSET = 0  (0: the weight as stored; 1: the weight plus the last argument w_offset, in fp32 (Gemma's 1 + w, FlashInfer's weight_bias + w))
// kt:bind KT_EXPERT_RESIDUAL_IN = 0  (general form only; 0: the residual read and the sum stored back in it; 1: the residual read from residual_in (its own buffer, the last argument, no weight offset) and the sum stored to residual (TensorRT-LLM's residual out))
// kt:bind KT_EXPERT_GENERAL = 0  (0: x and residual of one type, both rewritten in place; 1: x read (type T), the sum stored in the residual (type R, e.g. an fp32 residual stream), the normalized row written to out (type O; out may be x))
// kt:bind KT_EXPERT_QUANT = 0  (general form only, no weight offset or residual_in; 0: out holds the normalized row; out quantized to fp8 (O __nv_fp8_e4m3 or __nv_fp8_e5m2) by a static per-tensor scale, the one fp32 value at the last argument `scale` (a device pointer), clamped to O's finite range and converted with saturation to nearest even: 1 times 1 / *scale (the reciprocal taken once, vLLM's static fp8 quant), 2 divided by *scale, 3 times *scale (the tensor holds the quantization multiplier))
// kt:bind KT_EXPERT_BIAS = 0  (general form only, no weight offset or quant (residual_in allowed: it comes before `bias`); 0: x + residual; 1: plus a bias [hidden] of x's type (the argument `bias` after hidden; null adds nothing), added in fp32 with the one rounding to R: (x + residual) + bias (FasterTransformer / TensorRT-LLM add-bias-residual); 2: each add rounded to R: R(R(x + residual) + bias) (lmdeploy's 16-bit Array adds); 3: the bias added after the sum is stored: the residual keeps R(x + residual) without it, the row normalized is T(R(x + residual) + bias) (LLM-engineering's FusedAddBiasResidualRMSNorm: decoder_out += residual; residual = decoder_out; decoder_out += bias))
// kt:bind KT_EXPERT_SKIP = 0  (general form only, with no bias; 0: the sum stored in the residual; 1: the sum stored nowhere, the residual only read (a skip / post-norm RMSNorm: EET's add_input_RMSnorm, out = RMSNorm(out + input) * w in place), x and out may be one buffer)
// kt:bind KT_EXPERT_INV_COUNT = 0  (general form only, as KT_EXPERT_BIAS; 0: the mean of squares ss / hidden; 1: ss * inv_count, a float argument after `bias` (the host's 1 / hidden, lmdeploy's inv_dims); with either convention the call passes both `bias` and `inv_count`)
// kt:bind KT_EXPERT_STATS = 0  (general form only, no weight offset, quant, bias or inverse count (residual_in allowed: it comes before `rstd_out`); 0: the rows alone; 1: also each row's reciprocal RMS, the inv its elements are multiplied by (rsqrt(mean(z^2) + eps), or 1 / (sqrt(mean(z^2)) + eps) with KT_EXPERT_EPS_INSIDE 0), stored in fp32 to rstd_out[row] (the last argument): the statistic the backward pass reads (llm.c's fused residual RMSNorm rrms, Liger's and flash-attn's fused add + RMSNorm rstd))
// kt:bind KT_EXPERT_SUM_FP32 = 0  (general form only, no bias; 0: the sum x + residual rounded to R, and that rounded value squared and normalized; 1: the sum kept in fp32 for the sum of squares and the normalized row, rounded to R only where it is stored as the residual (QuACK's RMSNorm with a residual: h = x + residual in fp32 registers, residual_out its bf16 copy))
// kt:bind KT_EXPERT_QUANT_ROUND = 1  (with KT_EXPERT_QUANT only; 1: the weighted value rounded to T before it is scaled (vLLM: T(x * rstd) * w done in T); 0: scaled as computed in fp32)
// kt:bind KT_EXPERT_X_STRIDE = 0  (one-type in-place form only, no weight offset; 0: x's rows hidden elements apart; 1: x_stride elements apart (the last argument): x a row of a wider buffer, read and normalized in place, the residual contiguous (vLLM's fused_add_rms_norm with input_stride, FlashInfer's stride_input))
#if KT_EXPERT_QUANT  // kt:bind
#include <cuda_fp8.h>
#endif  // kt:bind
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

namespace kt {

#if KT_EXPERT_QUANT  // kt:bind
// fp8 output: a stored value converts with saturation to the finite range, rounding to nearest even (the fp8 types'
// own conversion); the largest finite value of each type for the clamp before it.
template <> __device__ __forceinline__ __nv_fp8_e4m3 from_f<__nv_fp8_e4m3>(float v) { return __nv_fp8_e4m3(v); }
template <> __device__ __forceinline__ __nv_fp8_e5m2 from_f<__nv_fp8_e5m2>(float v) { return __nv_fp8_e5m2(v); }
template <typename O> struct Fp8Max;
template <> struct Fp8Max<__nv_fp8_e4m3> { static constexpr float value = 448.f; };
template <> struct Fp8Max<__nv_fp8_e5m2> { static constexpr float value = 57344.f; };

#endif  // kt:bind
#if KT_EXPERT_GENERAL  // kt:bind
// z = x + residual rounded to the residual's type R and stored there; out = z * rsqrt(mean(z^2) + eps) * w, of
// out's type O. x and out may be the same buffer (in place): x is read into registers before out is written.
// P: the row path (scalar, vector, peeled: _rows.cuh), each compiled apart.
template <int IT, int P, typename T, typename R, typename W, typename O>
__device__ __forceinline__ void fused_add_rms_norm_impl(const T* x, R* __restrict__ residual,
#if KT_EXPERT_RESIDUAL_IN == 1  // kt:bind
                                                        const R* __restrict__ residual_in,
#endif  // kt:bind
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                                                        const W* __restrict__ w, O* out, float eps, int rows,
                                                        int hidden, float w_offset) {
#elif KT_EXPERT_STATS  // kt:bind
                                                        const W* __restrict__ w, O* out, float eps, int rows,
                                                        int hidden, float* __restrict__ rstd_out) {
#elif KT_EXPERT_QUANT  // kt:bind
                                                        const W* __restrict__ w, O* out, float eps, int rows,
                                                        int hidden, const float* __restrict__ scale) {
#elif KT_EXPERT_BIAS | KT_EXPERT_INV_COUNT  // kt:bind
                                                        const W* __restrict__ w, O* out, float eps, int rows,
                                                        int hidden, const T* __restrict__ bias, float inv_count) {
#else  // kt:bind
                                                        const W* __restrict__ w, O* out, float eps, int rows,
                                                        int hidden) {
#endif  // kt:bind
  const int row = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = row < rows;
  const long long off = (long long)(active ? row : 0) * hidden;
  const int lead = rows_lead<P, KT_VEC>(off);
#if KT_EXPERT_QUANT == 1  // kt:bind
  const float qs = 1.f / *scale;  // once, as the original's one division per thread
#elif KT_EXPERT_QUANT  // kt:bind
  const float qs = *scale;
#endif  // kt:bind
  float v[IT][KT_VEC];
  rows_load<0, KT_VEC, IT, P>(x + off, hidden, v, lead);
  float ss = 0.f;
#if KT_EXPERT_BIAS == 3  // kt:bind
  float rz[IT][KT_VEC];  // x + residual, stored as the residual: the bias is added to the normalized row only
#elif KT_EXPERT_SUM_FP32  // kt:bind
  float rz[IT][KT_VEC];  // x + residual rounded to R, stored as the residual: the row itself stays in fp32
#endif  // kt:bind
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    float r[KT_VEC];
#if KT_EXPERT_RESIDUAL_IN == 1  // kt:bind
    rows_load_item<0, KT_VEC, IT, P>(residual_in + off, hidden, i, r, lead);
#else  // kt:bind
    rows_load_item<0, KT_VEC, IT, P>(residual + off, hidden, i, r, lead);
#endif  // kt:bind
#if KT_EXPERT_BIAS  // kt:bind
    float b[KT_VEC];  // the bias, indexed by column as the weight is (null: nothing added)
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
      const float z = round_t<R>(v[i][j] + r[j] + b[j]);
#elif KT_EXPERT_BIAS == 2  // kt:bind
      const float z = round_t<R>(round_t<R>(v[i][j] + r[j]) + b[j]);
#elif KT_EXPERT_BIAS == 3  // kt:bind
      rz[i][j] = round_t<R>(v[i][j] + r[j]);  // the residual stream, without the bias
      const float z = round_t<T>(rz[i][j] + b[j]);
#elif KT_EXPERT_SUM_FP32  // kt:bind
      const float z = v[i][j] + r[j];  // squared and normalized as computed
      rz[i][j] = round_t<R>(z);        // the residual stream, rounded
#else  // kt:bind
      const float z = round_t<R>(v[i][j] + r[j]);
#endif  // kt:bind
      v[i][j] = z;
      ss += z * z;
    }
  }
#if KT_EXPERT_SKIP  // kt:bind
  // a skip RMSNorm: the sum is normalized and stored nowhere (the residual is only read)
#elif (KT_EXPERT_BIAS == 3) | KT_EXPERT_SUM_FP32  // kt:bind
  if (active) rows_store<0, KT_VEC, IT, P>(residual + off, hidden, rz, lead);
#else  // kt:bind
  if (active) rows_store<0, KT_VEC, IT, P>(residual + off, hidden, v, lead);
#endif  // kt:bind
  ss = row_reduce<0, KT_ROWS, 0>(ss, Sum(), 0.f);
#if KT_EXPERT_INV_COUNT  // kt:bind
#if KT_EXPERT_EPS_INSIDE == 0  // kt:bind
  const float inv = 1.f / (sqrtf(ss * inv_count) + eps);
#else  // kt:bind
  const float inv = rsqrtf(ss * inv_count + eps);
#endif  // kt:bind
#elif KT_EXPERT_EPS_INSIDE == 0  // kt:bind
  const float inv = 1.f / (sqrtf(ss / (float)hidden) + eps);
#else  // kt:bind
  const float inv = rsqrtf(ss / (float)hidden + eps);
#endif  // kt:bind
#if KT_EXPERT_STATS  // kt:bind
  if (active && threadIdx.x == 0) rstd_out[row] = inv;  // the reciprocal RMS, fp32, once per row
#endif  // kt:bind
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    float wv[KT_VEC];
    rows_weight_item<0, KT_VEC, IT, P>(w, hidden, i, wv, lead);
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) wv[j] += w_offset;
#endif  // kt:bind
#pragma unroll
#if KT_EXPERT_ROUND_BEFORE_WEIGHT == 0  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] * inv * wv[j];
#elif KT_EXPERT_QUANT  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = round_t<T>(v[i][j] * inv) * wv[j];
#else  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = round_t<O>(v[i][j] * inv) * wv[j];
#endif  // kt:bind
#if KT_EXPERT_QUANT  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
#if KT_EXPERT_QUANT_ROUND  // kt:bind
      const float y = round_t<T>(v[i][j]);
#else  // kt:bind
      const float y = v[i][j];
#endif  // kt:bind
#if KT_EXPERT_QUANT == 2  // kt:bind
      const float q = y / qs;
#else  // kt:bind
      const float q = y * qs;
#endif  // kt:bind
      v[i][j] = fmaxf(-Fp8Max<O>::value, fminf(q, Fp8Max<O>::value));  // then converted by the store
    }
#endif  // kt:bind
  }
  if (active) rows_store<0, KT_VEC, IT, P>(out + off, hidden, v, lead);
}

template <typename T, typename R, typename W, typename O>
#if KT_EXPERT_RESIDUAL_IN * KT_EXPERT_STATS  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(const T* x, R* residual, const W* w, O* out, float eps, int rows,
                                                   int hidden, const R* residual_in, float* rstd_out) {
#elif KT_EXPERT_STATS  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(const T* x, R* residual, const W* w, O* out, float eps, int rows,
                                                   int hidden, float* rstd_out) {
#elif KT_EXPERT_RESIDUAL_IN * (KT_EXPERT_BIAS | KT_EXPERT_INV_COUNT)  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(const T* x, R* residual, const W* w, O* out, float eps, int rows,
                                                   int hidden, const R* residual_in, const T* bias, float inv_count) {
#elif KT_EXPERT_RESIDUAL_IN == 1  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(const T* x, R* residual, const W* w, O* out, float eps, int rows,
                                                   int hidden, const R* residual_in) {
#elif KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(const T* x, R* residual, const W* w, O* out, float eps, int rows,
                                                   int hidden, float w_offset) {
#elif KT_EXPERT_QUANT  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(const T* x, R* residual, const W* w, O* out, float eps, int rows,
                                                   int hidden, const float* scale) {
#elif KT_EXPERT_BIAS | KT_EXPERT_INV_COUNT  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(const T* x, R* residual, const W* w, O* out, float eps, int rows,
                                                   int hidden, const T* bias, float inv_count) {
#else  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(const T* x, R* residual, const W* w, O* out, float eps, int rows,
                                                   int hidden) {
#endif  // kt:bind
#if KT_EXPERT_RESIDUAL_IN * KT_EXPERT_STATS  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<R, KT_VEC>(hidden, residual, residual_in) &&
                   vec_ok<W, KT_VEC>(hidden, w) && vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<R, KT_VEC>(0, residual, residual_in) && vec_ok<O, KT_VEC>(0, out)),
                  (fused_add_rms_norm_impl<IT, P, T, R, W, O>(x, residual, residual_in, w, out, eps, rows, hidden,
                                                              rstd_out)));
#elif KT_EXPERT_RESIDUAL_IN * (KT_EXPERT_BIAS | KT_EXPERT_INV_COUNT)  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x, bias) && vec_ok<R, KT_VEC>(hidden, residual, residual_in) &&
                   vec_ok<W, KT_VEC>(hidden, w) && vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<R, KT_VEC>(0, residual, residual_in) && vec_ok<O, KT_VEC>(0, out)),
                  (fused_add_rms_norm_impl<IT, P, T, R, W, O>(x, residual, residual_in, w, out, eps, rows, hidden, bias,
                                                              inv_count)));
#elif KT_EXPERT_RESIDUAL_IN == 1  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<R, KT_VEC>(hidden, residual, residual_in) &&
                   vec_ok<W, KT_VEC>(hidden, w) && vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<R, KT_VEC>(0, residual, residual_in) && vec_ok<O, KT_VEC>(0, out)),
                  (fused_add_rms_norm_impl<IT, P, T, R, W, O>(x, residual, residual_in, w, out, eps, rows, hidden)));
#elif KT_EXPERT_BIAS | KT_EXPERT_INV_COUNT  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x, bias) && vec_ok<R, KT_VEC>(hidden, residual) &&
                   vec_ok<W, KT_VEC>(hidden, w) && vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<R, KT_VEC>(0, residual) && vec_ok<O, KT_VEC>(0, out)),
                  (fused_add_rms_norm_impl<IT, P, T, R, W, O>(x, residual, w, out, eps, rows, hidden, bias,
                                                              inv_count)));
#else  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<R, KT_VEC>(hidden, residual) && vec_ok<W, KT_VEC>(hidden, w) &&
                   vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<R, KT_VEC>(0, residual) && vec_ok<O, KT_VEC>(0, out)),
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                  (fused_add_rms_norm_impl<IT, P, T, R, W, O>(x, residual, w, out, eps, rows, hidden, w_offset)));
#elif KT_EXPERT_STATS  // kt:bind
                  (fused_add_rms_norm_impl<IT, P, T, R, W, O>(x, residual, w, out, eps, rows, hidden, rstd_out)));
#elif KT_EXPERT_QUANT  // kt:bind
                  (fused_add_rms_norm_impl<IT, P, T, R, W, O>(x, residual, w, out, eps, rows, hidden, scale)));
#else  // kt:bind
                  (fused_add_rms_norm_impl<IT, P, T, R, W, O>(x, residual, w, out, eps, rows, hidden)));
#endif  // kt:bind
#endif  // kt:bind
}
#else  // kt:bind
// P: the row path (scalar, vector, peeled: _rows.cuh), each compiled apart.
template <int IT, int P, typename T, typename W>
__device__ __forceinline__ void fused_add_rms_norm_impl(T* __restrict__ x, T* __restrict__ residual,
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                                                   const W* __restrict__ w, float eps, int rows, int hidden,
                                                   float w_offset) {
#elif KT_EXPERT_X_STRIDE  // kt:bind
                                                   const W* __restrict__ w, float eps, int rows, int hidden,
                                                   long long x_stride) {
#else  // kt:bind
                                                   const W* __restrict__ w, float eps, int rows, int hidden) {
#endif  // kt:bind
  const int row = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = row < rows;
  const long long off = (long long)(active ? row : 0) * hidden;
  const int lead = rows_lead<P, KT_VEC>(off);
  float v[IT][KT_VEC];
#if KT_EXPERT_X_STRIDE  // kt:bind
  // x's row at its own stride: the dispatch gives the peeled path only where it keeps the residual's lead
  T* const xr = x + (long long)(active ? row : 0) * x_stride;
  rows_load<0, KT_VEC, IT, P>(xr, hidden, v, lead);
#else  // kt:bind
  rows_load<0, KT_VEC, IT, P>(x + off, hidden, v, lead);
#endif  // kt:bind
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    float r[KT_VEC];
    rows_load_item<0, KT_VEC, IT, P>(residual + off, hidden, i, r, lead);
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
      const float z = round_t<T>(v[i][j] + r[j]);
      v[i][j] = z;
      ss += z * z;
    }
  }
  if (active) rows_store<0, KT_VEC, IT, P>(residual + off, hidden, v, lead);
  ss = row_reduce<0, KT_ROWS, 0>(ss, Sum(), 0.f);
#if KT_EXPERT_EPS_INSIDE == 0  // kt:bind
  const float inv = 1.f / (sqrtf(ss / (float)hidden) + eps);
#else  // kt:bind
  const float inv = rsqrtf(ss / (float)hidden + eps);
#endif  // kt:bind
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    float wv[KT_VEC];
    rows_weight_item<0, KT_VEC, IT, P>(w, hidden, i, wv, lead);
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) wv[j] += w_offset;
#endif  // kt:bind
#pragma unroll
#if KT_EXPERT_ROUND_BEFORE_WEIGHT == 0  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] * inv * wv[j];
#else  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = round_t<T>(v[i][j] * inv) * wv[j];
#endif  // kt:bind
  }
#if KT_EXPERT_X_STRIDE  // kt:bind
  if (active) rows_store<0, KT_VEC, IT, P>(xr, hidden, v, lead);
#else  // kt:bind
  if (active) rows_store<0, KT_VEC, IT, P>(x + off, hidden, v, lead);
#endif  // kt:bind
}

template <typename T, typename W>
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(T* x, T* residual, const W* w, float eps, int rows, int hidden,
                                                   float w_offset) {
#elif KT_EXPERT_X_STRIDE  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(T* x, T* residual, const W* w, float eps, int rows, int hidden,
                                                   long long x_stride) {
  // vector rows need the stride a multiple of the vector; the peeled rows x's lead the same as the residual's
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x, residual) && x_stride % KT_VEC == 0 && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x, residual) && (x_stride - hidden) % KT_VEC == 0),
                  (fused_add_rms_norm_impl<IT, P, T, W>(x, residual, w, eps, rows, hidden, x_stride)));
}
#else  // kt:bind
__device__ __forceinline__ void fused_add_rms_norm(T* x, T* residual, const W* w, float eps, int rows, int hidden) {
#endif  // kt:bind
#if KT_EXPERT_X_STRIDE == 0  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x, residual) && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x, residual)),
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                  (fused_add_rms_norm_impl<IT, P, T, W>(x, residual, w, eps, rows, hidden, w_offset)));
#else  // kt:bind
                  (fused_add_rms_norm_impl<IT, P, T, W>(x, residual, w, eps, rows, hidden)));
#endif  // kt:bind
}
#endif  // kt:bind
#endif  // kt:bind

}  // namespace kt
