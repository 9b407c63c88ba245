/* kerntune-expert:
name = "per_token_group_quant_long"
family = "group_quant"
description = "Per-token (or long-group) quantization to int8 or fp8 e4m3 with one fp32 scale per group, for groups longer than a warp segment holds (a whole token of 2k-32k values: vLLM's dynamic_scaled_int8_quant and dynamic_per_token_scaled_fp8_quant, SGLang's per_token_quant_fp8, CTranslate2's quantize): the long-row twin of per_token_group_quant, with its numerics and conventions. One block per group, the group in registers (one read), 16-byte loads, a warp-shuffle + one-warp block reduction, VEC quantized values per store."
function = "kt::group_quant"
roles = ["x: in T[rows * group_size]", "q: out Q[rows * group_size]", "scales: out f32[rows]", "group_size: i32", "rows: i32", "eps: f32", "qmin: f32 (optional)", "qmax: f32 (optional)"]
constraints = ["VEC * ESIZE <= 16", "THREADS * VEC * ITEMS >= group_size"]

[params.THREADS]
values = [64, 128, 256, 512, 1024]
default = 256
kind = "block_size"
why = "most threads per group: the launch gives each group min(THREADS, ceil(group_size / (VEC * ITEMS)) rounded up to a warp) threads; the absolute maximum (or the minimum and maximum) reduced over them"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load: 16 bytes at most; scalar fallback when the group size or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4, 8, 16]
default = 8
kind = "items_per_thread"
why = "vectors each thread keeps in registers (THREADS * VEC * ITEMS must cover the group); a group that needs fewer uses the fewest that cover it"

[launch]
grid = ["rows"]
block = ["min(THREADS, round_up(cdiv(group_size, VEC * ITEMS), 32))"]
bounds = "THREADS"
smem = "0"
*/
// kt:bind KT_EXPERT_SCALE_RECIP = 0  (as per_token_group_quant's: 0 divided by the scale, 1 times 1 / scale, 2 times the factor qmax / absmax computed directly, the stored scale still absmax / qmax; 3 times that factor, the factor stored (1 for an all-zero group))
// kt:bind KT_EXPERT_SCALE_POW2 = 0  (as per_token_group_quant's: 0 absmax / qmax; 1 2^ceil(log2(absmax / qmax)); 2 the same on the bits; 3, 4 OCP MX floor scales (the exponent field, floorf(log2f)))
// kt:bind KT_EXPERT_SCALE_QRANGE = 0  (as per_token_group_quant's: int8 times 2^bits / (2 * absmax), 1 for an all-zero group; 1 stored 1 / factor, 2 the factor stored)
// kt:bind KT_EXPERT_GROUPS_FROM_GRID = 0  (1: rows is no group count (one token's groups): one group a block, the count is the grid)
// kt:bind KT_EXPERT_GROUPS_FROM_LAUNCH = 0  (1: the kernel has no count at all: one group a block, the count is the grid)
// kt:bind KT_EXPERT_SCALE_COLUMNS = 0  (0: scales[group]; 1: column-major [groups per token, tokens]; 2: columns of `stride` >= tokens)
// kt:bind KT_EXPERT_SCALE_BYTES = 0  (1: each power-of-two scale stored as its biased exponent byte (E8M0 / UE8M0))
// kt:bind KT_EXPERT_ASYM = 0  (as per_token_group_quant's: 1 a float zero point, the minimum; 2 an integer zero point round(qmin - min / scale) (vLLM's dynamic_scaled_int8_azp_quant, per token))
// kt:bind KT_EXPERT_ZERO_STORE = 0  (with KT_EXPERT_ASYM; 0: (scale, zero) fp32 pairs; 1: scales and zeros (of type Z) in two arrays)
// kt:bind KT_EXPERT_SCALE_UB = 0  (as per_token_group_quant's: the absmax bounded by a nullable one-element `ub` after qmax, eps the least scale: 1 max(min(absmax, *ub) / qmax, eps) (vLLM's dynamic_per_token_scaled_fp8_quant), 2 max(min(absmax, *ub), eps) / qmax)
// kt:bind KT_EXPERT_SCALE_FLOOR = 0  (as per_token_group_quant's: 0 eps floors the absmax, max(absmax, eps) / qmax; 1 eps floors the scale, max(absmax / qmax, eps) (OpenPPL's QTHRESHOLD))
// kt:bind KT_EXPERT_SCALE_OUT = 0  (as per_token_group_quant's: 1 the scales of the type S (third template argument: __half, __nv_bfloat16, float), each S(scale * mult) to nearest even, `mult` a float argument after qmax (OpenPPL's up_scale); the values still quantized by the fp32 scale; 2: as 1 with no factor, the values quantized by the scale as stored: x / float(S(scale)) rounded to the input's 16-bit type T before the integer rounding (PyTorch's fp16 tensor arithmetic, (x / scale).round() with x and scale fp16 tensors: SmoothQuant's torch-int))
// kt:bind KT_EXPERT_FP8_E5M2 = 0  (1: the output fp8 e5m2 (Q __nv_fp8_e5m2: qmax 57344, emax 15 for the MX floors), converted with saturation to nearest even (Transformer Engine's E5M2 casts of gradients, OCP MXFP8 E5M2, torchao's to_mx float8_e5m2))
#include <cuda_fp8.h>
#ifndef KT_THREADS
#define KT_THREADS 256
#endif
#ifndef KT_VEC
#define KT_VEC 8
#endif
#ifndef KT_ITEMS
#define KT_ITEMS 8
#endif
#ifndef KT_EXPERT_ROUND
#define KT_EXPERT_ROUND 0  // int8 rounding of the original: 0 to nearest even, 1 toward zero (a cast), 2 half away
#endif

namespace kt {

template <typename Q> struct QuantOut;
template <> struct QuantOut<int8_t> {
  static constexpr float qmax = 127.f, qmin = -128.f;
  __device__ static int8_t cvt(float v) {
#if KT_EXPERT_ROUND == 0
    return (int8_t)__float2int_rn(v);
#elif KT_EXPERT_ROUND == 1
    return (int8_t)v;
#else
    return (int8_t)roundf(v);
#endif
  }
};
template <> struct QuantOut<__nv_fp8_e4m3> {
  static constexpr float qmax = 448.f, qmin = -448.f;
  __device__ static __nv_fp8_e4m3 cvt(float v) { return __nv_fp8_e4m3(v); }
};
template <> struct QuantOut<uint8_t> {  // fp8 e4m3 stored as bytes
  static constexpr float qmax = 448.f, qmin = -448.f;
  __device__ static uint8_t cvt(float v) { return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3); }
};
#if KT_EXPERT_FP8_E5M2  // kt:bind
template <> struct QuantOut<__nv_fp8_e5m2> {
  static constexpr float qmax = 57344.f, qmin = -57344.f;
  __device__ static __nv_fp8_e5m2 cvt(float v) { return __nv_fp8_e5m2(v); }  // saturating, to nearest even
};
#endif  // kt:bind

#if KT_EXPERT_ASYM  // kt:bind
struct Min { __device__ __forceinline__ float operator()(float a, float b) const { return fminf(a, b); } };

// rounded as the original rounds (KT_EXPERT_ROUND): to nearest even, toward zero, half away from zero
__device__ __forceinline__ float asym_round(float v) {
#if KT_EXPERT_ROUND == 0
  return rintf(v);
#elif KT_EXPERT_ROUND == 1
  return truncf(v);
#else
  return roundf(v);
#endif
}

// the level of one value, a float holding an integer in [qmin, qmax]
__device__ __forceinline__ float asym_level(float v, float scale, float rscale, float zero, float qmin, float qmax) {
#if KT_EXPERT_ASYM == 2  // kt:bind
#if KT_EXPERT_SCALE_RECIP  // kt:bind
  return fminf(fmaxf(asym_round(v * rscale) + zero, qmin), qmax);
#else  // kt:bind
  return fminf(fmaxf(asym_round(v / scale) + zero, qmin), qmax);
#endif  // kt:bind
#else  // kt:bind
#if KT_EXPERT_SCALE_RECIP  // kt:bind
  return fminf(fmaxf(asym_round((v - zero) * rscale), qmin), qmax);
#else  // kt:bind
  return fminf(fmaxf(asym_round((v - zero) / scale), qmin), qmax);
#endif  // kt:bind
#endif  // kt:bind
}

// One group of group_size values per block (group blockIdx.x), held in registers: its minimum and maximum by a
// block reduction, its (scale, zero), the values' levels stored VEC at a time.
#if KT_EXPERT_ZERO_STORE  // kt:bind
template <int IT, typename T, typename Q, typename Z>
__device__ __forceinline__ void group_quant_long_asym(const T* __restrict__ x, Q* __restrict__ q,
                                                      float* __restrict__ scales, Z* __restrict__ zeros,
                                                      int group_size, float eps, float qmin, float qmax) {
#else  // kt:bind
template <int IT, typename T, typename Q>
__device__ __forceinline__ void group_quant_long_asym(const T* __restrict__ x, Q* __restrict__ q,
                                                      float* __restrict__ scales, int group_size, float eps,
                                                      float qmin, float qmax) {
#endif  // kt:bind
  const long long g = blockIdx.x;
  const long long off = g * group_size;
  const bool vec = vec_ok<T, KT_VEC>(group_size, x);
  float v[IT][KT_VEC];
  row_load<0, KT_VEC, IT>(x + off, group_size, vec, v);
  float mn = __int_as_float(0x7f800000), mx = -mn;  // the slots past the group's end (read as 0) take no part
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j)
      if (row_elem<0, KT_VEC, IT>(vec, i, j) < group_size) {
        mn = fminf(mn, v[i][j]);
        mx = fmaxf(mx, v[i][j]);
      }
  mn = row_reduce<0, 1, 1>(mn, Min(), __int_as_float(0x7f800000));
  mx = row_reduce<0, 1, 2>(mx, Max(), -__int_as_float(0x7f800000));
  const float scale = fmaxf(mx - mn, eps) / (qmax - qmin);
#if KT_EXPERT_SCALE_RECIP  // kt:bind
  const float rscale = 1.f / scale;
#else  // kt:bind
  const float rscale = scale;  // unused: the values are divided by the scale
#endif  // kt:bind
#if KT_EXPERT_ASYM == 2  // kt:bind
  const float zero = asym_round(qmin - mn / scale);  // the integer zero point
#else  // kt:bind
  const float zero = mn;
#endif  // kt:bind
  if (threadIdx.x == 0) {
#if KT_EXPERT_ZERO_STORE  // kt:bind
    scales[g] = scale;
    zeros[g] = (Z)zero;
#else  // kt:bind
    scales[2LL * g] = scale;  // the (scale, zero) pair of the group
    scales[2LL * g + 1] = zero;
#endif  // kt:bind
  }
  Q* qo = q + off;
  if (vec && ((uintptr_t)qo & (sizeof(Q) * KT_VEC - 1)) == 0) {
#pragma unroll
    for (int i = 0; i < IT; ++i) {
      const int e = row_elem<0, KT_VEC, IT>(true, i, 0);
      if (e < group_size) {
        Vec<Q, KT_VEC> t;
#pragma unroll
        for (int j = 0; j < KT_VEC; ++j)
          t.v[j] = (Q)__float2int_rn(asym_level(v[i][j], scale, rscale, zero, qmin, qmax));
        *reinterpret_cast<Vec<Q, KT_VEC>*>(qo + e) = t;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < IT; ++i)
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) {
        const int e = row_elem<0, KT_VEC, IT>(vec, i, j);
        if (e < group_size) qo[e] = (Q)__float2int_rn(asym_level(v[i][j], scale, rscale, zero, qmin, qmax));
      }
  }
}

#if KT_EXPERT_ZERO_STORE  // kt:bind
template <typename T, typename Q, typename Z>
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, Z* zeros, int group_size, int rows,
                                            float eps, float qmin, float qmax) {
  KT_DISPATCH_ITEMS((int)blockDim.x, group_size,
                    (group_quant_long_asym<IT, T, Q, Z>(x, q, scales, zeros, group_size, eps, qmin, qmax)));
}
#else  // kt:bind
template <typename T, typename Q>
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax) {
  KT_DISPATCH_ITEMS((int)blockDim.x, group_size,
                    (group_quant_long_asym<IT, T, Q>(x, q, scales, group_size, eps, qmin, qmax)));
}
#endif  // kt:bind
#else  // kt:bind
// One group of group_size values per block (group blockIdx.x; the launch has one block per group, so the group count
// is the grid whatever `rows` holds), held in registers: its absolute maximum by a block reduction, its scale as
// per_token_group_quant computes it, the values quantized and stored VEC at a time.
#if KT_EXPERT_SCALE_OUT  // kt:bind
template <int IT, typename T, typename Q, typename S>
__device__ __forceinline__ void group_quant_long(const T* __restrict__ x, Q* __restrict__ q, S* __restrict__ scales,
                                                 int group_size, float eps, float qmin, float qmax, float mult) {
#else  // kt:bind
template <int IT, typename T, typename Q>
#if KT_EXPERT_SCALE_COLUMNS == 2  // kt:bind
__device__ __forceinline__ void group_quant_long(const T* __restrict__ x, Q* __restrict__ q,
                                                 float* __restrict__ scales, int group_size, int rows, float eps,
                                                 float qmin, float qmax, int tokens, int stride) {
#elif KT_EXPERT_SCALE_COLUMNS  // kt:bind
__device__ __forceinline__ void group_quant_long(const T* __restrict__ x, Q* __restrict__ q,
                                                 float* __restrict__ scales, int group_size, int rows, float eps,
                                                 float qmin, float qmax, int tokens) {
#elif KT_EXPERT_SCALE_UB  // kt:bind
__device__ __forceinline__ void group_quant_long(const T* __restrict__ x, Q* __restrict__ q,
                                                 float* __restrict__ scales, int group_size, float eps, float qmin,
                                                 float qmax, const float* __restrict__ ub) {
#else  // kt:bind
__device__ __forceinline__ void group_quant_long(const T* __restrict__ x, Q* __restrict__ q,
                                                 float* __restrict__ scales, int group_size, float eps, float qmin,
                                                 float qmax) {
#endif  // kt:bind
#endif  // kt:bind
  const long long g = blockIdx.x;
  const long long off = g * group_size;
  const bool vec = vec_ok<T, KT_VEC>(group_size, x);
  float v[IT][KT_VEC];
  row_load<0, KT_VEC, IT>(x + off, group_size, vec, v);
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) m = fmaxf(m, fabsf(v[i][j]));
  m = row_reduce<0, 1, 0>(m, Max(), 0.f);
#if KT_EXPERT_SCALE_UB  // kt:bind
  if (ub != nullptr) m = fminf(m, *ub);  // the upper bound on the absmax, where there is one
#if KT_EXPERT_SCALE_UB == 2  // kt:bind
  m = fmaxf(m, eps);
#endif  // kt:bind
#elif KT_EXPERT_SCALE_FLOOR  // kt:bind
  // eps floors the scale below, not the absmax
#else  // kt:bind
  m = fmaxf(m, eps);
#endif  // kt:bind
#if KT_EXPERT_SCALE_QRANGE  // kt:bind
  // the quantization range 2^bits of the type over twice the group's maximum, in float as written (q_range / (2 *
  // absmax)); an all-zero group's factor 1
  const float kt_factor = m == 0.f ? 1.f : (QuantOut<Q>::qmax - QuantOut<Q>::qmin + 1.f) / (2.f * m);
#if KT_EXPERT_SCALE_QRANGE == 2  // kt:bind
  const float scale = kt_factor;  // stored: the factor itself
#else  // kt:bind
  const float scale = 1.f / kt_factor;  // stored: the dequantization scale 1 / factor
#endif  // kt:bind
#elif KT_EXPERT_SCALE_POW2 == 3  // kt:bind
  // floor(log2(absmax)) from the exponent field (absmax 0: the field 0), less emax of qmax; the biased exponent
  // clamped to [0, 254]
  const int kt_emax = (int)((__float_as_uint(qmax) >> 23) & 0xffu) - 127;
  const int kt_biased = min(max((int)((__float_as_uint(m) >> 23) & 0xffu) - 127 - kt_emax + 127, 0), 254);
  const float scale = exp2f((float)(kt_biased - 127));  // a power of two: 1 / scale is exact
#elif KT_EXPERT_SCALE_POW2 == 4  // kt:bind
  // floorf(log2f(absmax)) less emax of qmax; the biased exponent clamped to [0, 254], 0 for absmax 0
  const int kt_emax = (int)((__float_as_uint(qmax) >> 23) & 0xffu) - 127;
  const int kt_biased = m > 0.f ? min(max((int)floorf(log2f(m)) - kt_emax + 127, 0), 254) : 0;
  const float scale = exp2f((float)(kt_biased - 127));  // a power of two: 1 / scale is exact
#elif KT_EXPERT_SCALE_POW2 == 2  // kt:bind
  const unsigned kt_bits = __float_as_uint(m / qmax);  // the exponent field, plus one when a mantissa bit is set
  const float scale = __uint_as_float((((kt_bits >> 23) & 0xffu) + ((kt_bits & 0x7fffffu) != 0u ? 1u : 0u)) << 23);
#elif KT_EXPERT_SCALE_POW2  // kt:bind
  const float scale = exp2f(ceilf(log2f(m / qmax)));  // a power of two: 1 / scale is exact
#elif KT_EXPERT_SCALE_RECIP == 3  // kt:bind
  const float scale = m == 0.f ? 1.f : qmax / m;  // stored: the factor qmax / absmax itself (1 for an all-zero group)
#elif KT_EXPERT_SCALE_UB == 1  // kt:bind
  const float scale = fmaxf(m / qmax, eps);  // the floor on the scale
#elif KT_EXPERT_SCALE_FLOOR  // kt:bind
  const float scale = fmaxf(m / qmax, eps);  // the floor on the scale
#else  // kt:bind
  const float scale = m / qmax;
#endif  // kt:bind
#if KT_EXPERT_SCALE_QRANGE  // kt:bind
  const float rscale = kt_factor;  // the values multiplied by the factor
#elif KT_EXPERT_SCALE_RECIP == 3  // kt:bind
  const float rscale = scale;  // the values multiplied by the factor they store
#elif KT_EXPERT_SCALE_RECIP == 2  // kt:bind
  const float rscale = qmax / m;  // the factor qmax / absmax, rounded once as computed (not 1 / scale)
#elif KT_EXPERT_SCALE_RECIP  // kt:bind
  const float rscale = 1.f / scale;
#endif  // kt:bind
  if (threadIdx.x == 0) {
#if KT_EXPERT_SCALE_COLUMNS == 2  // kt:bind
    const int per_token = rows / tokens;  // column-major, columns of stride
    scales[(long long)(g % per_token) * stride + g / per_token] = scale;
#elif KT_EXPERT_SCALE_COLUMNS  // kt:bind
    const int per_token = rows / tokens;  // column-major: group g is the (g % per_token)-th group of its token
    scales[(long long)(g % per_token) * tokens + g / per_token] = scale;
#elif KT_EXPERT_SCALE_BYTES  // kt:bind
    // the biased exponent byte of the power-of-two scale (the byte buffer came as the scales pointer)
    reinterpret_cast<unsigned char*>(scales)[g] = (unsigned char)((__float_as_uint(scale) >> 23) & 0xffu);
#elif KT_EXPERT_SCALE_OUT  // kt:bind
    scales[g] = from_f<S>(scale * mult);  // the fp32 scale times the factor, in the scales' own type (to nearest even)
#else  // kt:bind
    scales[g] = scale;
#endif  // kt:bind
  }
#if KT_EXPERT_SCALE_OUT == 2  // kt:bind
  const float qscale = to_f(from_f<S>(scale * mult));  // the values quantized by the scale as stored
#endif  // kt:bind
  Q* qo = q + off;
  if (vec && ((uintptr_t)qo & (sizeof(Q) * KT_VEC - 1)) == 0) {
    // VEC quantized values leave as one store (VEC bytes), like the loads
#pragma unroll
    for (int i = 0; i < IT; ++i) {
      const int e = row_elem<0, KT_VEC, IT>(true, i, 0);
      if (e < group_size) {
        Vec<Q, KT_VEC> t;
#pragma unroll
#if KT_EXPERT_SCALE_RECIP + KT_EXPERT_SCALE_QRANGE  // kt:bind
        for (int j = 0; j < KT_VEC; ++j) t.v[j] = QuantOut<Q>::cvt(fminf(fmaxf(v[i][j] * rscale, qmin), qmax));
#elif KT_EXPERT_SCALE_OUT == 2  // kt:bind
        for (int j = 0; j < KT_VEC; ++j) t.v[j] = QuantOut<Q>::cvt(fminf(fmaxf(round_t<T>(v[i][j] / qscale), qmin), qmax));
#else  // kt:bind
        for (int j = 0; j < KT_VEC; ++j) t.v[j] = QuantOut<Q>::cvt(fminf(fmaxf(v[i][j] / scale, qmin), qmax));
#endif  // kt:bind
        *reinterpret_cast<Vec<Q, KT_VEC>*>(qo + e) = t;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < IT; ++i)
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) {
        const int e = row_elem<0, KT_VEC, IT>(vec, i, j);
#if KT_EXPERT_SCALE_RECIP + KT_EXPERT_SCALE_QRANGE  // kt:bind
        if (e < group_size) qo[e] = QuantOut<Q>::cvt(fminf(fmaxf(v[i][j] * rscale, qmin), qmax));
#elif KT_EXPERT_SCALE_OUT == 2  // kt:bind
        if (e < group_size) qo[e] = QuantOut<Q>::cvt(fminf(fmaxf(round_t<T>(v[i][j] / qscale), qmin), qmax));
#else  // kt:bind
        if (e < group_size) qo[e] = QuantOut<Q>::cvt(fminf(fmaxf(v[i][j] / scale, qmin), qmax));
#endif  // kt:bind
      }
  }
}

#if KT_EXPERT_SCALE_OUT  // kt:bind
template <typename T, typename Q, typename S>
__device__ __forceinline__ void group_quant(const T* x, Q* q, S* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, float mult) {
  KT_DISPATCH_ITEMS((int)blockDim.x, group_size,
                    (group_quant_long<IT, T, Q, S>(x, q, scales, group_size, eps, qmin, qmax, mult)));
}
#else  // kt:bind
template <typename T, typename Q>
#if KT_EXPERT_SCALE_COLUMNS == 2  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, int tokens, int stride) {
  KT_DISPATCH_ITEMS((int)blockDim.x, group_size, (group_quant_long<IT, T, Q>(x, q, scales, group_size, rows, eps, qmin,
                                                                            qmax, tokens, stride)));
}
#elif KT_EXPERT_SCALE_COLUMNS  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, int tokens) {
  KT_DISPATCH_ITEMS((int)blockDim.x, group_size,
                    (group_quant_long<IT, T, Q>(x, q, scales, group_size, rows, eps, qmin, qmax, tokens)));
}
#elif KT_EXPERT_SCALE_UB  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, const float* ub) {
  KT_DISPATCH_ITEMS((int)blockDim.x, group_size,
                    (group_quant_long<IT, T, Q>(x, q, scales, group_size, eps, qmin, qmax, ub)));
}
#else  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax) {
  KT_DISPATCH_ITEMS((int)blockDim.x, group_size,
                    (group_quant_long<IT, T, Q>(x, q, scales, group_size, eps, qmin, qmax)));
}
#endif  // kt:bind
#endif  // kt:bind
#endif  // kt:bind

}  // namespace kt
