/* kerntune-expert:
name = "rms_norm"
family = "rms_norm"
description = "RMSNorm over rows: out = (T)(x * rsqrt(mean(x^2) + eps)) * w. One pass over memory (the row stays in registers), 16-byte loads, warp-shuffle + one-warp block reduction, several rows per block for short rows."
function = "kt::rms_norm"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "w: in W[hidden]", "eps: f32", "rows: i32", "hidden: i32"]
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

[launch]
grid = ["cdiv(rows, ROWS)"]
block = ["min(THREADS, round_up(cdiv(hidden, VEC * ITEMS), 32))", "ROWS"]
bounds = "THREADS * ROWS"
smem = "0"
*/
// kt:bind KT_EXPERT_EPS_INSIDE = 1  (1: rsqrt(mean(x^2) + eps), 0: 1 / (sqrt(mean(x^2)) + eps))
// kt:bind KT_EXPERT_WEIGHT = 1  (1: times a weight of hidden elements; 0: no weight (w is not read))
// kt:bind KT_EXPERT_ROUND_BEFORE_WEIGHT = 1  (1: the normalized value rounded to T, then times the weight; 0: times the weight in fp32, rounded once)
// kt:bind KT_EXPERT_X_STRIDE = 0  (0: the input rows hidden elements apart; 1: x_stride elements apart (the last argument; no weight offset): a row of a wider buffer, as vLLM's rms_norm takes a non-contiguous input; the output rows stay contiguous; 2: the input AND output rows x_stride elements apart, the first hidden of each normalized and the rest neither read nor written (Chitu's rms_norm over a strided view, written back into the same view))
// kt:bind KT_EXPERT_WEIGHT_OFFSET = 0  (0: the weight as stored; 1: the weight plus the last argument w_offset, in fp32 (Gemma's 1 + w, FlashInfer's weight_bias + w))
// kt:bind KT_EXPERT_QUANT = 0  (no stride or weight offset; 0: out holds the normalized row (type T); out quantized to fp8 (type O, __nv_fp8_e4m3 or __nv_fp8_e5m2) by a static per-tensor scale, the one fp32 value at the last argument `scale` (a device pointer), clamped to O's finite range and converted with saturation to nearest even: 1 times 1 / *scale (the reciprocal taken once, vLLM's static fp8 quant), 2 divided by *scale, 3 times *scale (the tensor holds the quantization multiplier))
// kt:bind KT_EXPERT_QUANT_ROUND = 1  (with KT_EXPERT_QUANT only; 1: the weighted value rounded to T before it is scaled (vLLM: T(x * rstd) * w done in T); 0: scaled as computed in fp32)
// kt:bind KT_EXPERT_QUANT_DYNAMIC = 0  (with KT_EXPERT_QUANT 1 or 2 (times 1 / scale taken once per row, divided by it); 0: the static scale; a dynamic scale per row instead (vLLM's rms_norm_dynamic_per_token_quant, fp8 or int8): out (type O) holds the row y (the weighted value, rounded as KT_EXPERT_QUANT_ROUND says) quantized by scale, stored to scales[row] (fp32, the second argument); qmax the largest value of O (448 e4m3, 57344 e5m2, 127 int8), ub a nullable one-element upper bound on the absmax, floor the least scale: 1 scale = max(min(absmax(y), *ub) / qmax, floor) (vLLM), 2 scale = max(min(absmax(y), *ub), floor) / qmax (the floor on the absmax); fp8 clamped to its finite range and converted with saturation, int8 (int8_t) converted by cvt.rni.sat.s8.f32 alone (to nearest even, saturated to [-128, 127], vLLM's float_to_int8_rn))
// kt:bind KT_EXPERT_STATS = 0  (no quant or stride; 0: out alone; 1: also each row's reciprocal RMS, the inv its elements are multiplied by (rsqrt(mean(x^2) + eps), or 1 / (sqrt(mean(x^2)) + eps) with KT_EXPERT_EPS_INSIDE 0), stored in fp32 to rstd_out[row] (the argument after hidden, before w_offset): the statistic the backward pass reads (Transformer Engine's rsigma, Apex's invvar, PyTorch's rstd))
// kt:bind KT_EXPERT_OUT_TYPE = 0  (no quant, stride, weight offset or stats; 0: out of x's type T; 1: of a type of its own, O (fp32 activations in and 16-bit out, or 16-bit in and fp32 out: ONNX Runtime's SimplifiedLayerNorm<T, float, V>, Transformer Engine's itype / otype, ExLlamaV2's input_fp32 / output_fp32), the normalized value rounded to O where KT_EXPERT_ROUND_BEFORE_WEIGHT says so)
// kt:bind KT_EXPERT_QUANT_INT8 = 0  (with the static KT_EXPERT_QUANT only; 0: out fp8, clamped to its finite range and converted with saturation; 1: out int8 (O int8_t), the scaled value converted by cvt.rni.sat.s8.f32 alone: to nearest even, saturated to [-128, 127] (TensorRT-LLM's SmoothQuant RMSNorm by a per-tensor scale, its cuda_cast<int8_t>))
// kt:bind KT_EXPERT_POST_ADD = 0  (no quant, stride, weight offset, stats or out type; 0: out = the weighted normalized row; a residual added after the weight (post-norm: llama.cpp's fused rms_norm * mul + add, ExLlamaV2's add_residual y += norm(x)), the last argument `addend` of type T (out itself where the kernel accumulates into it): 1 addend[row] added in fp32, one rounding to T at the store; 2 the weighted value rounded to T first, then added and rounded again (a 16-bit add, ExLlamaV2's __hadd2); 3 a bias of the row's length (addend[col], TensorRT-LLM's RMSNorm beta) added in fp32, one rounding)
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
#if KT_EXPERT_QUANT_INT8  // kt:bind
// int8 output by the static scale: the scaled value converted by cvt.rni.sat.s8.f32 alone (to nearest even,
// saturated to [-128, 127]), no clamp before it.
template <> __device__ __forceinline__ int8_t from_f<int8_t>(float v) {
  int r;
  asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(r) : "f"(v));
  return (int8_t)r;
}

#endif  // kt:bind
#if KT_EXPERT_QUANT_DYNAMIC  // kt:bind
// A dynamic scale per row: O's largest value, and how a scaled value becomes O (fp8: clamped to the finite range,
// then the saturating conversion to nearest even; int8: cvt.rni.sat.s8.f32 alone, [-128, 127]).
template <typename O> struct DynQuant {
  static constexpr float qmax = Fp8Max<O>::value;
  __device__ static __forceinline__ float fit(float q) { return fmaxf(-qmax, fminf(q, qmax)); }
};
template <> struct DynQuant<int8_t> {
  static constexpr float qmax = 127.f;
  __device__ static __forceinline__ float fit(float q) { return q; }
};
template <> __device__ __forceinline__ int8_t from_f<int8_t>(float v) {
  int r;
  asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(r) : "f"(v));
  return (int8_t)r;
}

// P: the row path (scalar, vector, peeled: _rows.cuh), each compiled apart. The row stays in registers: its sum of
// squares, then the weighted row y and its absolute maximum (a second reduction), then y quantized by the row's scale.
template <int IT, int P, typename T, typename W, typename O>
__device__ __forceinline__ void rms_norm_dynamic_impl(O* __restrict__ out, float* __restrict__ scales,
                                                      const T* __restrict__ x, const W* __restrict__ w, float eps,
                                                      int rows, int hidden, const float* ub, float floor_) {
  const int row = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = row < rows;  // no early return: the block reductions need every thread
  const long long off = (long long)(active ? row : 0) * hidden;
  const int lead = rows_lead<P, KT_VEC>(off);
  float v[IT][KT_VEC];
  rows_load<0, KT_VEC, IT, P>(x + off, hidden, v, lead);
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) ss += v[i][j] * v[i][j];
  ss = row_reduce<0, KT_ROWS, 0>(ss, Sum(), 0.f);
#if KT_EXPERT_EPS_INSIDE == 0  // kt:bind
  const float inv = 1.f / (sqrtf(ss / (float)hidden) + eps);
#else  // kt:bind
  const float inv = rsqrtf(ss / (float)hidden + eps);
#endif  // kt:bind
  float m = 0.f;  // the padding is 0 (0 times a weight read as 0)
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    float wv[KT_VEC];
#if KT_EXPERT_WEIGHT == 0  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) wv[j] = 1.f;
#else  // kt:bind
    rows_weight_item<0, KT_VEC, IT, P>(w, hidden, i, wv, lead);
#endif  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
#if KT_EXPERT_ROUND_BEFORE_WEIGHT == 0  // kt:bind
      float y = v[i][j] * inv * wv[j];
#else  // kt:bind
      float y = round_t<T>(v[i][j] * inv) * wv[j];
#endif  // kt:bind
#if KT_EXPERT_QUANT_ROUND  // kt:bind
      y = round_t<T>(y);
#endif  // kt:bind
      v[i][j] = y;
      m = fmaxf(m, fabsf(y));
    }
  }
  m = row_reduce<0, KT_ROWS, 1>(m, Max(), 0.f);
  const float bounded = ub != nullptr ? fminf(m, *ub) : m;
#if KT_EXPERT_QUANT_DYNAMIC == 2  // kt:bind
  const float scale = fmaxf(bounded, floor_) / DynQuant<O>::qmax;
#else  // kt:bind
  const float scale = fmaxf(bounded / DynQuant<O>::qmax, floor_);
#endif  // kt:bind
  if (active && threadIdx.x == 0) scales[row] = scale;
#if KT_EXPERT_QUANT == 1  // kt:bind
  const float qs = 1.f / scale;  // once per row
#endif  // kt:bind
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j)
#if KT_EXPERT_QUANT == 1  // kt:bind
      v[i][j] = DynQuant<O>::fit(v[i][j] * qs);  // then converted by the store
#else  // kt:bind
      v[i][j] = DynQuant<O>::fit(v[i][j] / scale);  // then converted by the store
#endif  // kt:bind
  if (active) rows_store<0, KT_VEC, IT, P>(out + off, hidden, v, lead);
}

template <typename T, typename W, typename O>
__device__ __forceinline__ void rms_norm(O* out, float* scales, const T* x, const W* w, float eps, int rows,
                                         int hidden, const float* ub, float floor_) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (rms_norm_dynamic_impl<IT, P, T, W, O>(out, scales, x, w, eps, rows, hidden, ub, floor_)));
}
#else  // kt:bind
#if KT_EXPERT_QUANT | KT_EXPERT_OUT_TYPE  // kt:bind
// P: the row path (scalar, vector, peeled: _rows.cuh), each compiled apart.
template <int IT, int P, typename T, typename W, typename O>
__device__ __forceinline__ void rms_norm_impl(O* __restrict__ out, const T* __restrict__ x, const W* __restrict__ w,
#else  // kt:bind
// P: the row path (scalar, vector, peeled: _rows.cuh), each compiled apart.
template <int IT, int P, typename T, typename W>
__device__ __forceinline__ void rms_norm_impl(T* __restrict__ out, const T* __restrict__ x, const W* __restrict__ w,
#endif  // kt:bind
#if KT_EXPERT_X_STRIDE  // kt:bind
                                         long long x_stride,
#endif  // kt:bind
#if KT_EXPERT_STATS  // kt:bind
                                         float* __restrict__ rstd_out,
#endif  // kt:bind
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                                         float eps, int rows, int hidden, float w_offset) {
#elif KT_EXPERT_QUANT  // kt:bind
                                         float eps, int rows, int hidden, const float* __restrict__ scale) {
#elif KT_EXPERT_POST_ADD  // kt:bind
                                         float eps, int rows, int hidden, const T* addend) {
#else  // kt:bind
                                         float eps, int rows, int hidden) {
#endif  // kt:bind
  const int row = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = row < rows;  // no early return: the block reduction needs every thread
#if KT_EXPERT_X_STRIDE == 2  // kt:bind
  const long long off = (long long)(active ? row : 0) * x_stride;  // the output rows at the input's stride
#else  // kt:bind
  const long long off = (long long)(active ? row : 0) * hidden;
#endif  // kt:bind
  const int lead = rows_lead<P, KT_VEC>(off);
#if KT_EXPERT_QUANT == 1  // kt:bind
  const float qs = 1.f / *scale;  // once, as the original's one division per thread
#elif KT_EXPERT_QUANT  // kt:bind
  const float qs = *scale;
#endif  // kt:bind
  float v[IT][KT_VEC];
#if KT_EXPERT_X_STRIDE  // kt:bind
  // the input row at its own stride: the dispatch gives the peeled path only where it keeps the output's lead
  rows_load<0, KT_VEC, IT, P>(x + (long long)(active ? row : 0) * x_stride, hidden, v, lead);
#else  // kt:bind
  rows_load<0, KT_VEC, IT, P>(x + off, hidden, v, lead);
#endif  // kt:bind
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) ss += v[i][j] * v[i][j];
  ss = row_reduce<0, KT_ROWS, 0>(ss, Sum(), 0.f);
#if KT_EXPERT_EPS_INSIDE == 0  // kt:bind
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
#if KT_EXPERT_WEIGHT == 0  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) wv[j] = 1.f;
#else  // kt:bind
    rows_weight_item<0, KT_VEC, IT, P>(w, hidden, i, wv, lead);
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) wv[j] += w_offset;
#endif  // kt:bind
#endif  // kt:bind
#pragma unroll
#if KT_EXPERT_ROUND_BEFORE_WEIGHT == 0  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] * inv * wv[j];
#elif KT_EXPERT_OUT_TYPE  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = round_t<O>(v[i][j] * inv) * wv[j];
#else  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = round_t<T>(v[i][j] * inv) * wv[j];
#endif  // kt:bind
#if KT_EXPERT_POST_ADD  // kt:bind
    {
      // the addend's element where this thread stores out's (out may be the addend: read before it is written)
      float a[KT_VEC];
#if KT_EXPERT_POST_ADD == 3  // kt:bind
      rows_weight_item<0, KT_VEC, IT, P>(addend, hidden, i, a, lead);
#else  // kt:bind
      rows_load_item<0, KT_VEC, IT, P>(addend + off, hidden, i, a, lead);
#endif  // kt:bind
#pragma unroll
#if KT_EXPERT_POST_ADD == 2  // kt:bind
      for (int j = 0; j < KT_VEC; ++j) v[i][j] = round_t<T>(v[i][j]) + a[j];
#else  // kt:bind
      for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] + a[j];
#endif  // kt:bind
    }
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
#if KT_EXPERT_QUANT_INT8  // kt:bind
      v[i][j] = q;  // converted by the store (cvt.rni.sat.s8.f32)
#else  // kt:bind
      v[i][j] = fmaxf(-Fp8Max<O>::value, fminf(q, Fp8Max<O>::value));  // then converted by the store
#endif  // kt:bind
    }
#endif  // kt:bind
  }
  if (active) rows_store<0, KT_VEC, IT, P>(out + off, hidden, v, lead);
}

#if KT_EXPERT_QUANT  // kt:bind
template <typename T, typename W, typename O>
__device__ __forceinline__ void rms_norm(O* out, const T* x, const W* w, float eps, int rows, int hidden,
                                         const float* scale) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (rms_norm_impl<IT, P, T, W, O>(out, x, w, eps, rows, hidden, scale)));
}
#elif KT_EXPERT_OUT_TYPE  // kt:bind
// out of a type of its own: every pointer checked for its own type's vectors (a wider out too)
template <typename T, typename W, typename O>
__device__ __forceinline__ void rms_norm(O* out, const T* x, const W* w, float eps, int rows, int hidden) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (rms_norm_impl<IT, P, T, W, O>(out, x, w, eps, rows, hidden)));
}
#else  // kt:bind
template <typename T, typename W>
#if KT_EXPERT_STATS  // kt:bind
__device__ __forceinline__ void rms_norm(T* out, const T* x, const W* w, float eps, int rows, int hidden,
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                                         float* rstd_out, float w_offset) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x, out) && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x, out)),
                  (rms_norm_impl<IT, P, T, W>(out, x, w, rstd_out, eps, rows, hidden, w_offset)));
#else  // kt:bind
                                         float* rstd_out) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x, out) && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x, out)),
                  (rms_norm_impl<IT, P, T, W>(out, x, w, rstd_out, eps, rows, hidden)));
#endif  // kt:bind
}
#elif KT_EXPERT_X_STRIDE  // kt:bind
__device__ __forceinline__ void rms_norm(T* out, const T* x, const W* w, float eps, int rows, int hidden,
                                         long long x_stride) {
  // vector rows need the stride a multiple of the vector; the peeled rows the same lead as the output's (rows at one
  // stride in and out: the same lead always)
#if KT_EXPERT_X_STRIDE == 2  // kt:bind
  constexpr bool one_stride = true;
#else  // kt:bind
  constexpr bool one_stride = false;
#endif  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x, out) && x_stride % KT_VEC == 0 && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x, out) && (one_stride || (x_stride - hidden) % KT_VEC == 0)),
                  (rms_norm_impl<IT, P, T, W>(out, x, w, x_stride, eps, rows, hidden)));
}
#elif KT_EXPERT_POST_ADD  // kt:bind
__device__ __forceinline__ void rms_norm(T* out, const T* x, const W* w, float eps, int rows, int hidden,
                                         const T* addend) {
#if KT_EXPERT_POST_ADD == 3  // kt:bind
  // the bias indexed by column as the weight is: read an element at a time on the peeled path
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x, out, addend) && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x, out)), (rms_norm_impl<IT, P, T, W>(out, x, w, eps, rows, hidden, addend)));
#else  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x, out, addend) && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x, out, addend)),
                  (rms_norm_impl<IT, P, T, W>(out, x, w, eps, rows, hidden, addend)));
#endif  // kt:bind
}
#elif KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
__device__ __forceinline__ void rms_norm(T* out, const T* x, const W* w, float eps, int rows, int hidden,
                                         float w_offset) {
#else  // kt:bind
__device__ __forceinline__ void rms_norm(T* out, const T* x, const W* w, float eps, int rows, int hidden) {
#endif  // kt:bind
#if KT_EXPERT_STATS == 0  // kt:bind
#if KT_EXPERT_X_STRIDE + KT_EXPERT_POST_ADD == 0  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x, out) && vec_ok<W, KT_VEC>(hidden, w)),
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                  (vec_ok<T, KT_VEC>(0, x, out)),
                  (rms_norm_impl<IT, P, T, W>(out, x, w, eps, rows, hidden, w_offset)));
#else  // kt:bind
                  (vec_ok<T, KT_VEC>(0, x, out)), (rms_norm_impl<IT, P, T, W>(out, x, w, eps, rows, hidden)));
#endif  // kt:bind
}
#endif  // kt:bind
#endif  // kt:bind
#endif  // kt:bind
#endif  // kt:bind

}  // namespace kt
