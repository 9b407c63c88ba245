/* kerntune-expert:
name = "per_token_group_quant"
family = "group_quant"
description = "Per-token-group quantization to int8 or fp8 e4m3 with one fp32 scale per group: scale = max(absmax, eps) / QMAX, q = clamp(x / scale). A segment of LANES threads per group (warp-shuffle absmax), the group in registers (one read), 16-byte loads, VEC quantized values per store, several groups per block."
function = "kt::group_quant"
roles = ["x: in T[rows * group_size]", "q: out Q[rows * group_size]", "scales: out f32[rows]", "group_size: i32", "rows: i32", "eps: f32", "qmin: f32 (optional)", "qmax: f32 (optional)"]
constraints = ["VEC * ESIZE <= 16", "LANES * VEC * ITEMS >= group_size", "LANES * ROWS <= 1024", "LANES * ROWS >= 32"]

[params.LANES]
values = [4, 8, 16, 32]
default = 16
kind = "block_size"
why = "threads per group (a power-of-two segment of a warp; absmax by warp shuffles within it)"

[params.ROWS]
values = [1, 2, 4, 8, 16]
default = 8
kind = "rows_per_block"
why = "groups per block (blockDim.y)"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load: 16 bytes at most; scalar fallback when the group size or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4]
default = 1
kind = "items_per_thread"
why = "vectors each lane keeps in registers (LANES * VEC * ITEMS must cover the group)"

[launch]
grid = ["cdiv(rows, ROWS)"]
block = ["LANES", "ROWS"]
smem = "0"
*/
// kt:bind KT_EXPERT_SCALE_RECIP = 0  (0: values divided by the scale, 1: multiplied by 1 / scale, 2: multiplied by the factor qmax / absmax computed directly (DeepGEMM's per_token_cast_to_fp8: x * (448 / amax); vLLM's dynamic int8: x * (127 / absmax)), a rounding of its own, the stored scale still absmax / qmax; 3: multiplied by that factor and the factor stored as the scale (the quantization scale: CTranslate2's quantize, scale = 127 / amax; Transformer Engine's scale = fp8_max / amax), 1 for an all-zero group (absmax 0: eps 0); 4: the product first, (x * qmax) / absmax, as C reads `x * MAX / amax` (FastDeploy's per-token-per-block fp8), the stored scale absmax / qmax; with KT_EXPERT_SCALE_POW2 0 only)
// kt:bind KT_EXPERT_SCALE_POW2 = 0  (0: scale = absmax / qmax; 1: rounded up to a power of two, 2^ceil(log2(absmax / qmax)) (UE8M0 scales); 2: rounded up to a power of two on the bits (DeepGEMM's fast_log2_ceil, vLLM's packed path): the exponent field of absmax / qmax, plus one when a mantissa bit is set; OCP MX scales, the power of two below absmax over the largest of the type (torchao to_mx FLOOR, Transformer Engine / TensorRT-LLM MXFP8 casts): biased exponent e = floor(log2(absmax)) - emax + 127 (emax = floor(log2(qmax)), 8 for e4m3) clamped to [0, 254], 0 for absmax 0 (eps 0), scale = exp2f(e - 127) (the byte 0 is 2^-127); 3: floor(log2(absmax)) exact, read from the exponent field (or ilogbf / frexpf: the same bytes, absmax below 2^-119 giving 0 either way); 4: floorf(log2f(absmax)), log2f's rounding kept)
// kt:bind KT_EXPERT_SCALE_QRANGE = 0  (int8 only, with KT_EXPERT_SCALE_RECIP 1, KT_EXPERT_SCALE_POW2 0; 0: the scale absmax / qmax; the quantization range as a power of two (DeepSpeed's quantize::Params<Symmetric, q_bits>, ZeroQuant / ZeRO++ int8 groups): the factor 2^bits / (2 * absmax) (256 / (2 * absmax) = 128 / absmax for int8, the range from the type: +absmax maps to 128 and is clamped to qmax), an all-zero group (absmax 0: eps 0) given the factor 1, values multiplied by the factor, rounded (KT_EXPERT_ROUND) and clamped to [qmin, qmax]; 1: the stored scale 1 / factor (the dequantization scale, DeepSpeed's params); 2: the factor itself stored)
// kt:bind KT_EXPERT_GROUPS_FROM_GRID = 0  (row-major scales only; 0: rows is the group count; 1: rows is the groups of one token (the kernel has no count of them all): the count comes back from the launch's cdiv(groups, ROWS) blocks, exactly while ROWS <= the groups of a token; with KT_EXPERT_SCALE_PACKED 1, rows is not given: the byte slots come back from the grid, exactly while ROWS <= 4 * cdiv(per_token, 4))
// kt:bind KT_EXPERT_GROUPS_FROM_LAUNCH = 0  (row-major scales, fp32 or asymmetric; 0: rows is the group count; 1: the kernel has no count at all (no size argument, one block per group: a port of a framework's reference): launched with cdiv(groups, ROWS) blocks and the last block's groups (1 to ROWS) as its dynamic shared memory size in bytes, memory it never uses; the count comes back exactly, (gridDim.x - 1) * ROWS + %dynamic_smem_size, and rows is not read)
// kt:bind-smem KT_EXPERT_GROUPS_FROM_LAUNCH = ["rows - (cdiv(rows, ROWS) - 1) * ROWS"]
// kt:bind KT_EXPERT_SCALE_COLUMNS = 0  (0: scales[group] (row-major); 1: column-major, [groups per token, tokens]: the scale of a token's column-th group at column * tokens + token; 2: column-major with columns of `stride` >= tokens (the token count padded, DeepGEMM's TMA-aligned scales): at column * stride + token)
// kt:bind KT_EXPERT_SCALE_BYTES = 0  (row-major scales of power-of-two scales (KT_EXPERT_SCALE_POW2 1 to 4); 0: fp32 scales; 1: each scale stored as its biased exponent byte (E8M0 / UE8M0 uint8 scales [groups]: the exponent field of the float scale, 0 for 2^-127), the byte buffer passed as the scales pointer)
// kt:bind KT_EXPERT_SCALE_PACKED = 0  (0: fp32 scales; UE8M0 scales (KT_EXPERT_SCALE_POW2 1 or 2) as biased exponent bytes packed four to an int32 (DeepGEMM / SGLang / vLLM scale_ue8m0): byte k (bits 8k..8k+7) of a token's word w holds its group 4w + k, the bytes past its last group 0, each word stored whole by one thread; rows counts byte slots (4 a word), ROWS a multiple of 4. 1: words row-major [tokens, cdiv(per_token, 4)]; 2: words column-major, word w of token t at w * stride + t (SGLang's / vLLM's TMA-aligned int32 scales); token columns from `tokens` up to the slots' end are written 0)
// kt:bind KT_EXPERT_ASYM = 0  (0: symmetric, scale from the group's absolute maximum; asymmetric min/max quantization to integers (row-major groups; SCALE_POW2, SCALE_COLUMNS, SCALE_PACKED 0, SCALE_RECIP 0 or 1; rounded by KT_EXPERT_ROUND: to nearest even, toward zero, half away), scale = max(max - min, eps) / (qmax - qmin): 1: a float zero point, zero = min, q = clamp(round((x - zero) / scale), qmin, qmax) (KIVI / lmdeploy KV-cache and activation quantizers); 2: an integer zero point, zero = round(qmin - min / scale), q = clamp(round(x / scale) + zero, qmin, qmax) (vLLM's dynamic int8 azp, AWQ's zeros = -round(min / scale)); SCALE_RECIP 1: multiplied by 1 / scale instead of divided by it)
// kt:bind KT_EXPERT_ZERO_STORE = 0  (with KT_EXPERT_ASYM; 0: (scale, zero) interleaved as fp32 pairs in the scales buffer [groups, 2], the scale first (lmdeploy's params); 1: scales [groups] and zeros [groups] in two arrays, the zeros of the type Z (the function's third template argument: float, half, int32, uint8, ...), an integer zero point stored as its value)
// kt:bind KT_EXPERT_SCALE_UB = 0  (symmetric row-major fp32 scales only (SCALE_RECIP 0 or 1, SCALE_POW2 0, no SCALE_QRANGE, SCALE_COLUMNS, SCALE_BYTES, SCALE_PACKED); the scale as vLLM's dynamic_per_token_scaled_fp8_quant computes it: the group's absmax bounded from above by the value a nullable one-element fp32 input `ub` holds (the argument after qmax; null: no bound), with eps the least scale: 1 scale = max(min(absmax, *ub) / qmax, eps) (the floor on the scale: vLLM's min_scaling_factor, 1 / (448 * 512) for e4m3); 2 scale = max(min(absmax, *ub), eps) / qmax (the floor on the absmax))
// kt:bind KT_EXPERT_ROW_TAIL = 0  (symmetric row-major fp32 scales only (no SCALE_COLUMNS, SCALE_PACKED, SCALE_BYTES, SCALE_UB or SCALE_OUT, the group count given); 0: every group group_size elements, the input rows * group_size; 1: the input rows of row_len elements (the argument after qmax) each cut into cdiv(row_len, group_size) groups, the last of a row perhaps shorter (per-token-group quantization of a hidden size the group does not divide: FastDeploy's per-token-per-block fp8, Triton ports' masked tiles), rows counting every group of every row (tokens * cdiv(row_len, group_size)), scales row-major [tokens, cdiv(row_len, group_size)])
// kt:bind KT_EXPERT_SCALE_FLOOR = 0  (symmetric, SCALE_RECIP 0 or 1, SCALE_POW2 0, no SCALE_QRANGE or SCALE_UB (whose floor is its own); 0: eps floors the group's absmax, scale = max(absmax, eps) / qmax; 1: eps floors the scale, scale = max(absmax / qmax, eps) (OpenPPL's min_max_range_to_scale with its QTHRESHOLD 1e-7; vLLM's min_scaling_factor where there is no scale_ub))
// kt:bind KT_EXPERT_SCALE_OUT = 0  (symmetric row-major scales, SCALE_RECIP 0 or 1, SCALE_POW2 0, no SCALE_QRANGE, SCALE_COLUMNS, SCALE_BYTES, SCALE_PACKED or SCALE_UB; 0: fp32 scales, the scale as computed; 1: the scales of the type S (the function's third template argument: __half, __nv_bfloat16 or float), each the fp32 scale times a float factor `mult` (the argument after qmax: OpenPPL's up_scale "for precision"; 1.f where the kernel has none) converted to S to nearest even (half(scale * mult)); the values still divided by (or multiplied by 1 / of) the fp32 scale, unmultiplied; 2: as 1 with no factor, the values quantized by the scale as stored: x / float(S(scale)) rounded to the input's 16-bit type T before the integer rounding (PyTorch's fp16 tensor arithmetic, (x / scale).round() with x and scale fp16 tensors: SmoothQuant's torch-int))
// kt:bind KT_EXPERT_SCALE_DIV = 0  (symmetric, SCALE_RECIP 0 or 1, SCALE_POW2 0, no SCALE_QRANGE, SCALE_UB or SCALE_FLOOR; 0: scale = absmax / qmax by IEEE division; 1: by the PTX div.full.f32 (Triton's fp32 division, full-range approximate to 2 ulp) that CUDA ports of Triton's per-token-group quant write in inline asm to agree with it bit for bit (LongCat EPS))
// kt:bind KT_EXPERT_FP8_E5M2 = 0  (1: the output fp8 e5m2 (Q __nv_fp8_e5m2: qmax 57344, emax 15 for the MX floors), converted with saturation to nearest even (Transformer Engine's E5M2 casts of gradients, OCP MXFP8 E5M2, torchao's to_mx float8_e5m2))
// kt:bind KT_EXPERT_CODEBOOK = 0  (0: scales and rounding (int8, fp8); blockwise 4-bit codebook quantization (bitsandbytes' quantize_4bit, NF4 and FP4): the input a flat tensor of n values in groups of group_size consecutive values (the last may be short: its missing values read as 0, coded, never stored), one fp32 absmax per group stored as it is, each value's code the codebook's code of x * (1 / absmax) (KT_EXPERT_SCALE_RECIP 1, bitsandbytes') or x / absmax (0), chosen by the kernel's own thresholds (bind-time macros: KT_CODEBOOK_THRESHOLDS, 15 float32 values ascending, threshold k passed at >= where bit k of KT_CODEBOOK_GE is set, else at >; KT_CODEBOOK_CODES, the codes of the 16 intervals from the lowest; KT_CODEBOOK_NAN, the code of NaN, an all-zero group's 0 * (1 / 0)), two codes a byte: 1 the even element in the high nibble (bitsandbytes' CUDA kernels), 2 in the low nibble (bitsandbytes' CPU, XPU and HPU backends); the function takes the group count and n (long long) after the group size; VEC >= 2)
#include <cuda_fp8.h>
#ifndef KT_LANES
#define KT_LANES 16
#endif
#ifndef KT_ROWS
#define KT_ROWS 8
#endif
#ifndef KT_VEC
#define KT_VEC 8
#endif
#ifndef KT_ITEMS
#define KT_ITEMS 1
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

#if KT_EXPERT_CODEBOOK  // kt:bind
// Blockwise 4-bit codebook quantization (bitsandbytes' NF4 / FP4): a flat tensor of n values in groups of group_size
// consecutive values (the last one may be short: its missing values read as 0 and are coded like the others, never
// stored), one group per LANES-thread segment held in registers (one read), its absmax by warp shuffles stored as it
// is, each value's code the codebook's code of x * (1 / absmax) (or x / absmax), two codes a byte.

// The code of v: a branch-free binary search over the kernel's own 15 ascending thresholds (KT_CODEBOOK_THRESHOLDS;
// threshold k passed at >= where bit k of KT_CODEBOOK_GE is set, else at >, as the kernel compares), each level's
// threshold chosen among the constants by the comparisons above it; the interval found (how many thresholds v passes)
// coded by KT_CODEBOOK_CODES (the lowest interval's first). NaN passes no comparison and takes KT_CODEBOOK_NAN.
#define KT_CB_GE(k) ((((KT_CODEBOOK_GE) >> (k)) & 1u) != 0u)
__device__ __forceinline__ unsigned codebook_code(float v) {
  constexpr float kt_cb_t[15] = {KT_CODEBOOK_THRESHOLDS};
  constexpr unsigned kt_cb_c[16] = {KT_CODEBOOK_CODES};
  constexpr unsigned long long kt_cb_packed = (unsigned long long)kt_cb_c[0] |
      ((unsigned long long)kt_cb_c[1] << 4) | ((unsigned long long)kt_cb_c[2] << 8) |
      ((unsigned long long)kt_cb_c[3] << 12) | ((unsigned long long)kt_cb_c[4] << 16) |
      ((unsigned long long)kt_cb_c[5] << 20) | ((unsigned long long)kt_cb_c[6] << 24) |
      ((unsigned long long)kt_cb_c[7] << 28) | ((unsigned long long)kt_cb_c[8] << 32) |
      ((unsigned long long)kt_cb_c[9] << 36) | ((unsigned long long)kt_cb_c[10] << 40) |
      ((unsigned long long)kt_cb_c[11] << 44) | ((unsigned long long)kt_cb_c[12] << 48) |
      ((unsigned long long)kt_cb_c[13] << 52) | ((unsigned long long)kt_cb_c[14] << 56) |
      ((unsigned long long)kt_cb_c[15] << 60);
  constexpr bool kt_cb_identity = kt_cb_c[0] == 0 && kt_cb_c[1] == 1 && kt_cb_c[2] == 2 && kt_cb_c[3] == 3 &&
      kt_cb_c[4] == 4 && kt_cb_c[5] == 5 && kt_cb_c[6] == 6 && kt_cb_c[7] == 7 && kt_cb_c[8] == 8 &&
      kt_cb_c[9] == 9 && kt_cb_c[10] == 10 && kt_cb_c[11] == 11 && kt_cb_c[12] == 12 && kt_cb_c[13] == 13 &&
      kt_cb_c[14] == 14 && kt_cb_c[15] == 15;
  const bool p1 = KT_CB_GE(7) ? v >= kt_cb_t[7] : v > kt_cb_t[7];
  const float t2 = p1 ? kt_cb_t[11] : kt_cb_t[3];
  const bool g2 = p1 ? KT_CB_GE(11) : KT_CB_GE(3);
  const bool p2 = g2 ? v >= t2 : v > t2;
  const float t3 = p1 ? (p2 ? kt_cb_t[13] : kt_cb_t[9]) : (p2 ? kt_cb_t[5] : kt_cb_t[1]);
  const bool g3 = p1 ? (p2 ? KT_CB_GE(13) : KT_CB_GE(9)) : (p2 ? KT_CB_GE(5) : KT_CB_GE(1));
  const bool p3 = g3 ? v >= t3 : v > t3;
  const float t4 = p1 ? (p2 ? (p3 ? kt_cb_t[14] : kt_cb_t[12]) : (p3 ? kt_cb_t[10] : kt_cb_t[8]))
                      : (p2 ? (p3 ? kt_cb_t[6] : kt_cb_t[4]) : (p3 ? kt_cb_t[2] : kt_cb_t[0]));
  const bool g4 = p1 ? (p2 ? (p3 ? KT_CB_GE(14) : KT_CB_GE(12)) : (p3 ? KT_CB_GE(10) : KT_CB_GE(8)))
                     : (p2 ? (p3 ? KT_CB_GE(6) : KT_CB_GE(4)) : (p3 ? KT_CB_GE(2) : KT_CB_GE(0)));
  const bool p4 = g4 ? v >= t4 : v > t4;
  const unsigned i = 8u * p1 + 4u * p2 + 2u * p3 + 1u * p4;
  const unsigned c = kt_cb_identity ? i : (unsigned)(kt_cb_packed >> (4u * i)) & 15u;
  return (KT_CODEBOOK_NAN != kt_cb_c[0] && v != v) ? KT_CODEBOOK_NAN : c;
}

// Element (i * LANES + lane) * VEC + j of a group in v[i][j]: each even element and the next in one thread (VEC >= 2),
// 16-byte loads where the group size and x allow, VEC / 2 packed bytes a store.
template <int IT, typename T>
__device__ __forceinline__ void group_codebook_impl(const T* __restrict__ x, uint8_t* __restrict__ q,
                                                    float* __restrict__ scales, int group_size, int rows,
                                                    long long n) {
  static_assert(KT_VEC >= 2, "two codes a byte: a thread holds each even element and the next");
  const int g = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = g < rows;
  const long long off = (long long)(active ? g : 0) * group_size;
  const int len = active ? (int)(n - off < group_size ? n - off : group_size) : 0;  // the last group may be short
  const bool vec = vec_ok<T, KT_VEC>(group_size, x);
  float v[IT][KT_VEC];
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    const int e = (i * KT_LANES + (int)threadIdx.x) * KT_VEC;
    if (vec && e + KT_VEC <= len) {
      load_vec<T, KT_VEC>(x + off + e, v[i]);
    } else {
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) v[i][j] = e + j < len ? to_f(x[off + e + j]) : 0.f;
    }
  }
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) m = fmaxf(m, fabsf(v[i][j]));
  m = warp_reduce<KT_LANES>(m, Max());
  if (!active) return;  // no block-wide barrier below
  if (threadIdx.x == 0) scales[g] = m;  // the absmax itself
#if KT_EXPERT_SCALE_RECIP  // kt:bind
  const float r = 1.f / m;  // values times 1 / absmax (an all-zero group: 1 / 0 = inf, 0 * inf = NaN)
#endif  // kt:bind
  uint8_t* qo = q + off / 2;  // group_size is even: a group starts on a byte
  const bool vq = vec && ((uintptr_t)qo & (KT_VEC / 2 - 1)) == 0;
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    const int e = (i * KT_LANES + (int)threadIdx.x) * KT_VEC;
    if (e >= len) continue;
    Vec<uint8_t, KT_VEC / 2> t;
#pragma unroll
    for (int j = 0; j < KT_VEC; j += 2) {
#if KT_EXPERT_SCALE_RECIP  // kt:bind
      const unsigned a = codebook_code(v[i][j] * r), b = codebook_code(v[i][j + 1] * r);
#else  // kt:bind
      const unsigned a = codebook_code(v[i][j] / m), b = codebook_code(v[i][j + 1] / m);
#endif  // kt:bind
#if KT_EXPERT_CODEBOOK == 2  // kt:bind
      t.v[j / 2] = (uint8_t)((b << 4) | a);  // the even element in the low nibble
#else  // kt:bind
      t.v[j / 2] = (uint8_t)((a << 4) | b);  // the even element in the high nibble
#endif  // kt:bind
    }
    if (vq && e + KT_VEC <= len) {
      *reinterpret_cast<Vec<uint8_t, KT_VEC / 2>*>(qo + e / 2) = t;
    } else {
#pragma unroll
      for (int j = 0; j < KT_VEC; j += 2)
        if (e + j < len) qo[(e + j) / 2] = t.v[j / 2];
    }
  }
}
#elif KT_EXPERT_ASYM  // kt:bind
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

// the level of one value, a float holding an integer in [qmin, qmax] (bounds integral: rounding then clamping is
// clamping then rounding)
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

// One group of group_size values per LANES-thread segment, held in registers (one read): the group's minimum and
// maximum by warp shuffles, its (scale, zero), the values' levels stored VEC at a time.
#if KT_EXPERT_ZERO_STORE  // kt:bind
template <int IT, typename T, typename Q, typename Z>
__device__ __forceinline__ void group_quant_asym_impl(const T* __restrict__ x, Q* __restrict__ q,
                                                      float* __restrict__ scales, Z* __restrict__ zeros,
                                                      int group_size, int rows, float eps, float qmin, float qmax) {
#else  // kt:bind
template <int IT, typename T, typename Q>
__device__ __forceinline__ void group_quant_asym_impl(const T* __restrict__ x, Q* __restrict__ q,
                                                      float* __restrict__ scales, int group_size, int rows, float eps,
                                                      float qmin, float qmax) {
#endif  // kt:bind
  const int g = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = g < rows;
  const long long off = (long long)(active ? g : 0) * group_size;
  const bool vec = vec_ok<T, KT_VEC>(group_size, x);
  float v[IT][KT_VEC];
  row_load<KT_LANES, KT_VEC, IT>(x + off, group_size, vec, v);
  float mn = __int_as_float(0x7f800000), mx = -mn;  // the slots past the group's end (read as 0) take no part
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j)
      if (row_elem<KT_LANES, KT_VEC, IT>(vec, i, j) < group_size) {
        mn = fminf(mn, v[i][j]);
        mx = fmaxf(mx, v[i][j]);
      }
  mn = warp_reduce<KT_LANES>(mn, Min());
  mx = warp_reduce<KT_LANES>(mx, Max());
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
  if (!active) return;  // no block-wide barrier below
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
      const int e = row_elem<KT_LANES, KT_VEC, IT>(true, i, 0);
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
        const int e = row_elem<KT_LANES, KT_VEC, IT>(vec, i, j);
        if (e < group_size) qo[e] = (Q)__float2int_rn(asym_level(v[i][j], scale, rscale, zero, qmin, qmax));
      }
  }
}
#else  // kt:bind
#if KT_EXPERT_SCALE_OUT  // kt:bind
template <int IT, typename T, typename Q, typename S>
__device__ __forceinline__ void group_quant_impl(const T* __restrict__ x, Q* __restrict__ q, S* __restrict__ scales,
                                            int group_size, int rows, float eps, float qmin, float qmax, float mult) {
#else  // kt:bind
template <int IT, typename T, typename Q>
#if KT_EXPERT_SCALE_PACKED == 2  // kt:bind
__device__ __forceinline__ void group_quant_impl(const T* __restrict__ x, Q* __restrict__ q, int* __restrict__ scales,
                                            int group_size, int rows, float eps, float qmin, float qmax, int per_token,
                                            int tokens, int stride) {
#elif KT_EXPERT_SCALE_PACKED  // kt:bind
__device__ __forceinline__ void group_quant_impl(const T* __restrict__ x, Q* __restrict__ q, int* __restrict__ scales,
                                            int group_size, int rows, float eps, float qmin, float qmax, int per_token) {
#else  // kt:bind
__device__ __forceinline__ void group_quant_impl(const T* __restrict__ x, Q* __restrict__ q, float* __restrict__ scales,
#if KT_EXPERT_SCALE_COLUMNS == 2  // kt:bind
                                            int group_size, int rows, float eps, float qmin, float qmax, int tokens,
                                            int stride) {
#elif KT_EXPERT_SCALE_COLUMNS  // kt:bind
                                            int group_size, int rows, float eps, float qmin, float qmax, int tokens) {
#elif KT_EXPERT_SCALE_UB  // kt:bind
                                            int group_size, int rows, float eps, float qmin, float qmax,
                                            const float* __restrict__ ub) {
#elif KT_EXPERT_ROW_TAIL  // kt:bind
                                            int group_size, int rows, float eps, float qmin, float qmax, int row_len) {
#else  // kt:bind
                                            int group_size, int rows, float eps, float qmin, float qmax) {
#endif  // kt:bind
#endif  // kt:bind
#endif  // kt:bind
#if KT_EXPERT_SCALE_PACKED  // kt:bind
  // byte slot s: slot `col` of token `token`'s 4 * words, its group `col` while col < per_token, else a padding byte
  // of the token's last word (nothing loaded or stored, exponent byte 0)
  __shared__ unsigned kt_exponent[KT_ROWS];
  const int words = (per_token + 3) / 4;
  const int s = blockIdx.x * KT_ROWS + threadIdx.y;
  const int token = s / (4 * words), col = s - token * (4 * words);
#if KT_EXPERT_SCALE_PACKED == 2  // kt:bind
  const bool active = s < rows && col < per_token && token < tokens;
#else  // kt:bind
  const bool active = s < rows && col < per_token;
#endif  // kt:bind
  const long long off = (active ? (long long)token * per_token + col : 0LL) * group_size;
#elif KT_EXPERT_ROW_TAIL  // kt:bind
  // group g is group `col` of row `tok`: rows of row_len elements, each cut into cdiv(row_len, group_size) groups, the
  // last perhaps shorter (len elements)
  const int g = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = g < rows;
  const int per_row = (row_len + group_size - 1) / group_size;
  const int tok = (active ? g : 0) / per_row, col = (active ? g : 0) - tok * per_row;
  const long long off = (long long)tok * row_len + (long long)col * group_size;
  const int len = min(group_size, row_len - col * group_size);
#else  // kt:bind
  const int g = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = g < rows;
  const long long off = (long long)(active ? g : 0) * group_size;
#endif  // kt:bind
#if KT_EXPERT_ROW_TAIL  // kt:bind
  const bool vec = vec_ok<T, KT_VEC>(group_size, x) && row_len % KT_VEC == 0;  // every group starts aligned
#else  // kt:bind
  const bool vec = vec_ok<T, KT_VEC>(group_size, x);
#endif  // kt:bind
  float v[IT][KT_VEC];
#if KT_EXPERT_ROW_TAIL  // kt:bind
  row_load<KT_LANES, KT_VEC, IT>(x + off, len, vec, v);  // the row's last group: len elements
#else  // kt:bind
  row_load<KT_LANES, KT_VEC, IT>(x + off, group_size, vec, v);
#endif  // kt:bind
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) m = fmaxf(m, fabsf(v[i][j]));
  m = warp_reduce<KT_LANES>(m, Max());
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
#elif KT_EXPERT_SCALE_DIV  // kt:bind
  float scale;  // the body's division: div.full.f32 (Triton's fp32 division), not the IEEE one
  asm("div.full.f32 %0, %1, %2;" : "=f"(scale) : "f"(m), "f"(qmax));
#else  // kt:bind
  const float scale = m / qmax;
#endif  // kt:bind
#if KT_EXPERT_SCALE_QRANGE  // kt:bind
  const float rscale = kt_factor;  // the values multiplied by the factor
#elif KT_EXPERT_SCALE_RECIP == 3  // kt:bind
  const float rscale = scale;  // the values multiplied by the factor they store
#elif KT_EXPERT_SCALE_RECIP == 2  // kt:bind
  const float rscale = qmax / m;  // the factor qmax / absmax, rounded once as computed (not 1 / scale)
#elif KT_EXPERT_SCALE_RECIP == 4  // kt:bind
  const float rscale = 1.f / m;  // unused: each value times qmax, then divided by the absmax
#elif KT_EXPERT_SCALE_RECIP  // kt:bind
  const float rscale = 1.f / scale;
#endif  // kt:bind
#if KT_EXPERT_SCALE_PACKED  // kt:bind
  // a word's four slots are threadIdx.y 4k..4k+3 of one block (ROWS a multiple of 4, rows of whole words): their
  // exponent bytes meet in shared memory, and one thread stores the whole word (no other thread writes it)
  if (threadIdx.x == 0) kt_exponent[threadIdx.y] = active ? (__float_as_uint(scale) >> 23) & 0xffu : 0u;
  __syncthreads();  // every thread of the block gets here: none has returned
  if (threadIdx.x == 0 && (threadIdx.y & 3) == 0 && s < rows) {
    const unsigned word = kt_exponent[threadIdx.y] | (kt_exponent[threadIdx.y + 1] << 8) |
                          (kt_exponent[threadIdx.y + 2] << 16) | (kt_exponent[threadIdx.y + 3] << 24);
#if KT_EXPERT_SCALE_PACKED == 2  // kt:bind
    scales[(long long)(col / 4) * stride + token] = (int)word;
#else  // kt:bind
    scales[(long long)token * words + col / 4] = (int)word;
#endif  // kt:bind
  }
  if (!active) return;  // no block-wide barrier below
#else  // kt:bind
  if (!active) return;  // no block-wide barrier below
#if KT_EXPERT_SCALE_COLUMNS == 2  // kt:bind
  if (threadIdx.x == 0) {  // column-major, columns of stride: group g is the (g % per_token)-th group of token g / per_token
    const int per_token = rows / tokens;
    scales[(long long)(g % per_token) * stride + g / per_token] = scale;
  }
#elif KT_EXPERT_SCALE_COLUMNS  // kt:bind
  if (threadIdx.x == 0) {  // column-major: group g is the (g % per_token)-th group of token g / per_token
    const int per_token = rows / tokens;
    scales[(long long)(g % per_token) * tokens + g / per_token] = scale;
  }
#elif KT_EXPERT_SCALE_BYTES  // kt:bind
  // the biased exponent byte of the power-of-two scale (the byte buffer came as the scales pointer)
  if (threadIdx.x == 0)
    reinterpret_cast<unsigned char*>(scales)[g] = (unsigned char)((__float_as_uint(scale) >> 23) & 0xffu);
#elif KT_EXPERT_SCALE_OUT  // kt:bind
  // the fp32 scale times the factor, stored in the scales' own type (to nearest even)
  if (threadIdx.x == 0) scales[g] = from_f<S>(scale * mult);
#else  // kt:bind
  if (threadIdx.x == 0) scales[g] = scale;
#endif  // kt:bind
#endif  // kt:bind
#if KT_EXPERT_SCALE_OUT == 2  // kt:bind
  const float qscale = to_f(from_f<S>(scale * mult));  // the values quantized by the scale as stored
#endif  // kt:bind
  Q* qo = q + off;
  if (vec && ((uintptr_t)qo & (sizeof(Q) * KT_VEC - 1)) == 0) {
    // VEC quantized values leave as one store (VEC bytes), like the loads
#pragma unroll
    for (int i = 0; i < IT; ++i) {
      const int e = row_elem<KT_LANES, KT_VEC, IT>(true, i, 0);
#if KT_EXPERT_ROW_TAIL  // kt:bind
      if (e >= len) continue;  // past the row's last group
#endif  // kt:bind
      if (e < group_size) {
        Vec<Q, KT_VEC> t;
#pragma unroll
#if KT_EXPERT_SCALE_RECIP == 4  // kt:bind
        for (int j = 0; j < KT_VEC; ++j) t.v[j] = QuantOut<Q>::cvt(fminf(fmaxf(v[i][j] * qmax / m, qmin), qmax));
#elif KT_EXPERT_SCALE_RECIP  // kt:bind
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
        const int e = row_elem<KT_LANES, KT_VEC, IT>(vec, i, j);
#if KT_EXPERT_ROW_TAIL  // kt:bind
        if (e >= len) continue;  // past the row's last group
#endif  // kt:bind
#if KT_EXPERT_SCALE_RECIP == 4  // kt:bind
        if (e < group_size) qo[e] = QuantOut<Q>::cvt(fminf(fmaxf(v[i][j] * qmax / m, qmin), qmax));
#elif KT_EXPERT_SCALE_RECIP  // kt:bind
        if (e < group_size) qo[e] = QuantOut<Q>::cvt(fminf(fmaxf(v[i][j] * rscale, qmin), qmax));
#elif KT_EXPERT_SCALE_OUT == 2  // kt:bind
        if (e < group_size) qo[e] = QuantOut<Q>::cvt(fminf(fmaxf(round_t<T>(v[i][j] / qscale), qmin), qmax));
#else  // kt:bind
        if (e < group_size) qo[e] = QuantOut<Q>::cvt(fminf(fmaxf(v[i][j] / scale, qmin), qmax));
#endif  // kt:bind
      }
  }
}
#endif  // kt:bind

#if KT_EXPERT_GROUPS_FROM_LAUNCH  // kt:bind
// The group count of a launch of cdiv(groups, ROWS) blocks whose dynamic shared memory size (bytes, never used) is
// the number of groups of its last block.
__device__ __forceinline__ int groups_from_launch() {
  unsigned last;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(last));
  return (int)((gridDim.x - 1) * KT_ROWS + last);
}
#endif  // kt:bind
#if KT_EXPERT_CODEBOOK  // kt:bind
template <typename T>
__device__ __forceinline__ void group_quant(const T* x, uint8_t* q, float* scales, int group_size, int rows,
                                            long long n) {
  KT_DISPATCH_ITEMS(KT_LANES, group_size, (group_codebook_impl<IT, T>(x, q, scales, group_size, rows, n)));
}
#elif KT_EXPERT_ASYM  // kt:bind
#if KT_EXPERT_ZERO_STORE  // kt:bind
template <typename T, typename Q, typename Z>
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, Z* zeros, int group_size, int rows,
                                            float eps, float qmin, float qmax) {
#else  // kt:bind
template <typename T, typename Q>
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax) {
#endif  // kt:bind
#if KT_EXPERT_GROUPS_FROM_GRID  // kt:bind
  {  // rows: one token's groups; gridDim.x * ROWS lies in [groups, groups + ROWS), so the token count is exact
    const int per_token = rows;
    rows = (int)(((long long)gridDim.x * KT_ROWS) / per_token) * per_token;
  }
#endif  // kt:bind
#if KT_EXPERT_GROUPS_FROM_LAUNCH  // kt:bind
  rows = groups_from_launch();
#endif  // kt:bind
#if KT_EXPERT_ZERO_STORE  // kt:bind
  KT_DISPATCH_ITEMS(KT_LANES, group_size,
                    (group_quant_asym_impl<IT, T, Q, Z>(x, q, scales, zeros, group_size, rows, eps, qmin, qmax)));
#else  // kt:bind
  KT_DISPATCH_ITEMS(KT_LANES, group_size,
                    (group_quant_asym_impl<IT, T, Q>(x, q, scales, group_size, rows, eps, qmin, qmax)));
#endif  // kt:bind
}
#else  // kt:bind
#if KT_EXPERT_SCALE_OUT  // kt:bind
template <typename T, typename Q, typename S>
__device__ __forceinline__ void group_quant(const T* x, Q* q, S* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, float mult) {
#if KT_EXPERT_GROUPS_FROM_GRID  // kt:bind
  {  // rows: one token's groups; gridDim.x * ROWS lies in [groups, groups + ROWS), so the token count is exact
    const int per_token = rows;
    rows = (int)(((long long)gridDim.x * KT_ROWS) / per_token) * per_token;
  }
#endif  // kt:bind
#if KT_EXPERT_GROUPS_FROM_LAUNCH  // kt:bind
  rows = groups_from_launch();
#endif  // kt:bind
  KT_DISPATCH_ITEMS(KT_LANES, group_size,
                    (group_quant_impl<IT, T, Q, S>(x, q, scales, group_size, rows, eps, qmin, qmax, mult)));
}
#else  // kt:bind
template <typename T, typename Q>
#if KT_EXPERT_SCALE_PACKED == 2  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, int* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, int per_token, int tokens, int stride) {
  KT_DISPATCH_ITEMS(KT_LANES, group_size, (group_quant_impl<IT, T, Q>(x, q, scales, group_size, rows, eps, qmin, qmax,
                                                                      per_token, tokens, stride)));
}
#elif KT_EXPERT_SCALE_PACKED  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, int* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, int per_token) {
#if KT_EXPERT_GROUPS_FROM_GRID  // kt:bind
  {  // rows not given: gridDim.x * ROWS lies in [slots, slots + ROWS), a token has 4 * words slots >= ROWS
    const int slots = 4 * ((per_token + 3) / 4);
    rows = (int)(((long long)gridDim.x * KT_ROWS) / slots) * slots;
  }
#endif  // kt:bind
  KT_DISPATCH_ITEMS(KT_LANES, group_size,
                    (group_quant_impl<IT, T, Q>(x, q, scales, group_size, rows, eps, qmin, qmax, per_token)));
}
#elif KT_EXPERT_SCALE_COLUMNS == 2  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, int tokens, int stride) {
  KT_DISPATCH_ITEMS(KT_LANES, group_size,
                    (group_quant_impl<IT, T, Q>(x, q, scales, group_size, rows, eps, qmin, qmax, tokens, stride)));
}
#elif KT_EXPERT_SCALE_COLUMNS  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, int tokens) {
  KT_DISPATCH_ITEMS(KT_LANES, group_size,
                    (group_quant_impl<IT, T, Q>(x, q, scales, group_size, rows, eps, qmin, qmax, tokens)));
}
#elif KT_EXPERT_SCALE_UB  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, const float* ub) {
#if KT_EXPERT_GROUPS_FROM_GRID  // kt:bind
  {  // rows: one token's groups; gridDim.x * ROWS lies in [groups, groups + ROWS), so the token count is exact
    const int per_token = rows;
    rows = (int)(((long long)gridDim.x * KT_ROWS) / per_token) * per_token;
  }
#endif  // kt:bind
#if KT_EXPERT_GROUPS_FROM_LAUNCH  // kt:bind
  rows = groups_from_launch();
#endif  // kt:bind
  KT_DISPATCH_ITEMS(KT_LANES, group_size,
                    (group_quant_impl<IT, T, Q>(x, q, scales, group_size, rows, eps, qmin, qmax, ub)));
}
#elif KT_EXPERT_ROW_TAIL  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps,
                                            float qmin, float qmax, int row_len) {
  KT_DISPATCH_ITEMS(KT_LANES, group_size,
                    (group_quant_impl<IT, T, Q>(x, q, scales, group_size, rows, eps, qmin, qmax, row_len)));
}
#else  // kt:bind
__device__ __forceinline__ void group_quant(const T* x, Q* q, float* scales, int group_size, int rows, float eps, float qmin, float qmax) {
#if KT_EXPERT_GROUPS_FROM_GRID  // kt:bind
  {  // rows: one token's groups; gridDim.x * ROWS lies in [groups, groups + ROWS), so the token count is exact
    const int per_token = rows;
    rows = (int)(((long long)gridDim.x * KT_ROWS) / per_token) * per_token;
  }
#endif  // kt:bind
#if KT_EXPERT_GROUPS_FROM_LAUNCH  // kt:bind
  rows = groups_from_launch();
#endif  // kt:bind
  KT_DISPATCH_ITEMS(KT_LANES, group_size, (group_quant_impl<IT, T, Q>(x, q, scales, group_size, rows, eps, qmin, qmax)));
}
#endif  // kt:bind
#endif  // kt:bind
#endif  // kt:bind

}  // namespace kt
