/* kerntune-expert:
name = "act_and_mul"
family = "gated_activation"
description = "Gated activation: out[r, i] = (T)act(x[r, i]) * x[r, d + i] with act = SiLU, GELU (erf) or GELU (tanh). 16-byte loads and stores, several vectors per thread, one block per chunk of a row, blocks in memory order (the chunks of a row, then the next row)."
function = "kt::act_and_mul"
roles = ["out: out T[rows * d]", "x: in T[rows * 2 * d]", "d: i32"]
constraints = ["VEC * ESIZE <= 16", "THREADS * VEC * ITEMS <= 4 * d + THREADS * VEC", "rows * cdiv(d, THREADS * VEC * ITEMS) <= 2147483647"]

[params.THREADS]
values = [64, 128, 256, 512, 1024]
default = 256
kind = "block_size"
why = "threads per block"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load/store: 16 bytes at most; scalar fallback when d or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4]
default = 1
kind = "items_per_thread"
why = "vectors per thread (more independent loads in flight, fewer blocks)"

[launch]
grid = ["rows * cdiv(d, THREADS * VEC * ITEMS)"]
block = ["THREADS"]
smem = "0"
*/
// kt:bind KT_EXPERT_GATE_LAYOUT = 0  (0: [gate | up] halves of each 2 * d row, 1: [up | gate], 2: interleaved pairs (gate, up), 3: interleaved pairs (up, gate), 4: two tensors of [rows, d], gate x and up y)
// kt:bind KT_EXPERT_ROUND_ACT = 1  (1: the activation rounded to T before the multiply, 0: kept in fp32)
// kt:bind KT_EXPERT_OUT_TYPE = 0  (0: out of x's type; 1: of a type of its own, O (an fp32 GEMM output in, bf16 out))
// kt:bind KT_EXPERT_CLAMP = 0  (0: act(gate) * up; 1: gpt-oss's clamped SwiGLU (vLLM swigluoai_and_mul, TensorRT-LLM, ONNX Runtime MoE): gate = min(gate, limit), up = clamp(up, -limit, limit), out = (up + beta) * gate * sigmoid(alpha * gate), alpha, beta and limit floats after d, fp32 math)
// kt:bind KT_EXPERT_SIGMOID = 0  (the clamped gate's gate * sigmoid(alpha * gate) as 0: gate / (1 + expf(-alpha * gate)); 1: gate * (1 / (1 + expf(-alpha * gate))) (vLLM, ONNX Runtime); 2, 3: the same with __expf)
// kt:bind KT_EXPERT_QUANT = 0  (with KT_EXPERT_OUT_TYPE 1, no clamp; 0: out holds act(gate) * up; out quantized to fp8 (O __nv_fp8_e4m3 or __nv_fp8_e5m2) by a static per-tensor scale, the fp32 value `scale` after d (the wrapper reads it from a device pointer or passes a float argument), clamped to O's finite range and converted with saturation to nearest even: 1 times 1 / scale (the reciprocal taken once, vLLM's silu_and_mul_quant), 2 divided by scale, 3 times scale (the value is the quantization multiplier))
// kt:bind KT_EXPERT_QUANT_ROUND = 1  (with KT_EXPERT_QUANT only; 1: act(gate) * up rounded to T before it is scaled (vLLM: the product taken in T, __hmul); 0: scaled as computed in fp32)
// kt:bind KT_EXPERT_FAST_EXP = 0  (SiLU's exponential; 0: expf; 1: __expf (FlashInfer, TensorRT-LLM): bound where an exact comparison needs it, the fp8 output)
// kt:bind KT_EXPERT_FAST_DIV = 0  (with KT_EXPERT_FAST_EXP, SiLU's division as the body writes it: 0 v / (1 + __expf(-v)), IEEE; 1 __fdividef(v, 1 + __expf(-v)); 2 v * __fdividef(1, 1 + __expf(-v)) (the PTX div.full.f32, 2 ulp: CUDA ports that write SiLU with the fast intrinsics throughout))
// kt:bind KT_EXPERT_INPLACE = 0  (with KT_EXPERT_GATE_LAYOUT 4 only; 1: in place, the output written over the activation's input x (FasterTransformer / TensorRT-LLM's generic activation over the first GEMM's output): out and x one buffer, neither __restrict__; 2: the output written over the multiplied operand y (web-rwkv's silu: output = silu(input) * output): out and y one buffer, neither __restrict__)
// kt:bind KT_EXPERT_BIAS = 0  (1: with KT_EXPERT_GATE_LAYOUT 4 only; bias vectors [d] bx and by after y, each may be null (checked), added to x and to y before the activation and the product, each sum rounded to T (FasterTransformer's __hadd2); a null y: out = act(x + bx), no product; 2: with KT_EXPERT_GATE_LAYOUT 0 or 1 only; one bias [2 * d] after x, laid out as the gated row (ONNX Runtime's BiasSplitGelu, the GEGLU of a diffusion UNet after a GEMM without its bias): bias[c] added to the first half's column c, bias[d + c] to the second's, each sum rounded to T before the activation and the product)
// kt:bind KT_EXPERT_ERF_DIV = 0  (with KT_EXPERT_ACT 1; 0: erff(v * 0.70710678f); 1: erff(v / 1.41421356237f), the argument divided by the float nearest sqrt(2) (ONNX Runtime's BiasSplitGelu, BERT's x * 0.5 * (1 + erf(x / sqrt(2)))): the same erf GELU, its argument rounded otherwise)
// kt:bind KT_EXPERT_GATE_FN = 0  (0: KT_EXPERT_ACT's activation (SiLU, GELU erf, GELU tanh); activations of no such transcendental, or of another, in fp32: 1 ReLU max(v, 0) (ReGLU: Transformer Engine's reglu, llama.cpp's GLU op REGLU); 2 squared ReLU v > 0 ? v * v : 0 (Transformer Engine's sreglu, Primer's relu^2 gate); 3 quick GELU v / (1 + expf(-1.702 v)), v * sigmoid(1.702 v) (Transformer Engine's qgeglu, llama.cpp's GEGLU_QUICK, CTranslate2's gelu_sigmoid, vLLM's gelu_quick); 4 FATReLU v > threshold ? v : 0 with the float `threshold` after d (vLLM's fatrelu_and_mul; one gated-row input of the output's type only); 5 the sigmoid 1 / (1 + expf(-v)) (the original GLU, torch.nn.functional.glu: one half times the sigmoid of the other; Caffe2's GluOp))
// kt:bind KT_EXPERT_GELU_FORM = 0  (with KT_EXPERT_ACT 2; 0: 0.5 v (1 + tanhf(0.79788456 (v + 0.044715 v^3))) in fp32; 1: FasterTransformer / TensorRT-LLM's GeluActivation of a packed 16-bit type: v^3 as two products each rounded to T, cdf = 0.5 (1 + tanh.approx.f32(0.79788456 (v + 0.044715 v^3))) in fp32 rounded to T, times v rounded to T; 2: the same with tanhf)
// kt:bind KT_EXPERT_TANH = 0  (with KT_EXPERT_ACT 2 and no KT_EXPERT_GELU_FORM: the fp32 GELU's tanh; 0: tanhf; 1: tanh.approx.f32, one PTX instruction (ExLlamaV2 / V3's tanh_opt, FasterTransformer's fp32 GELU): 0.5 v (1 + t) in fp32; 2: tanh.approx.f32 with 1 + t and its product with 0.5 v taken in double, rounded to fp32 once (ExLlamaV2 / V3's `0.5f * x * (1.0 + tanh_opt(...))`: the double literal 1.0))
// kt:bind KT_EXPERT_ACT_LIMIT = 0  (1: ExLlamaV3's act_limit, the float `limit` after d (0: off): up clamped to [-limit, limit] and act(gate) from above at limit before the product, by comparisons as the original's (a NaN passes))
// kt:bind KT_EXPERT_SATURATE = 0  (1: each result clamped to the 16-bit output type's finite range before it is stored (ExLlamaV3's clamp_half2_to_finite, +-65504 for fp16): the store's rounding is monotonic, so clamping the fp32 value first is the same; a NaN is stored as the largest finite value, as __hmin2 and fminf both return the other operand)
#if KT_EXPERT_QUANT  // kt:bind
#include <cuda_fp8.h>
#endif  // kt:bind
#ifndef KT_THREADS
#define KT_THREADS 256
#endif
#ifndef KT_VEC
#define KT_VEC 8
#endif
#ifndef KT_ITEMS
#define KT_ITEMS 1
#endif
#ifndef KT_EXPERT_ACT
#define KT_EXPERT_ACT 0  // 0: SiLU, 1: GELU (erf), 2: GELU (tanh approximation); set by the binding
#endif

namespace kt {

#if KT_EXPERT_GATE_LAYOUT / 2 == 1  // kt:bind
// Interleaved (gate, up) pairs: output element e reads x[2e] and x[2e + 1] (UP_FIRST: the other
// way round). Same element layout as row_load; on the vector path one item is VEC pairs, two 16-byte loads.
template <int THREADS, int VEC, int ITEMS, bool UP_FIRST, typename T>
__device__ __forceinline__ void pair_load(const T* __restrict__ r, int n, bool vec, float (&va)[ITEMS][VEC],
                                          float (&vg)[ITEMS][VEC]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if (vec) {
      const int e = row_elem<THREADS, VEC, ITEMS>(true, i, 0);
      float p0[VEC], p1[VEC];
      if (e < n) {
        load_vec<T, VEC>(r + 2 * e, p0);
        load_vec<T, VEC>(r + 2 * e + VEC, p1);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) p0[j] = p1[j] = 0.f;
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float a = 2 * j < VEC ? p0[2 * j] : p1[2 * j - VEC];
        const float b = 2 * j + 1 < VEC ? p0[2 * j + 1] : p1[2 * j + 1 - VEC];
        va[i][j] = UP_FIRST ? b : a;
        vg[i][j] = UP_FIRST ? a : b;
      }
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int e = row_elem<THREADS, VEC, ITEMS>(false, i, j);
        const float a = e < n ? to_f(r[2 * e]) : 0.f, b = e < n ? to_f(r[2 * e + 1]) : 0.f;
        va[i][j] = UP_FIRST ? b : a;
        vg[i][j] = UP_FIRST ? a : b;
      }
    }
  }
}

#endif  // kt:bind
__device__ __forceinline__ float gate_act(float v) {
#if KT_EXPERT_GATE_FN == 1  // kt:bind
  return fmaxf(v, 0.f);
#elif KT_EXPERT_GATE_FN == 2  // kt:bind
  return v > 0.f ? v * v : 0.f;
#elif KT_EXPERT_GATE_FN == 3  // kt:bind
  return v / (1.f + expf(-1.702f * v));
#elif KT_EXPERT_GATE_FN == 5  // kt:bind
  return 1.f / (1.f + expf(-v));  // the sigmoid alone: GLU's x * sigmoid(gate)
#else  // kt:bind
#if KT_EXPERT_ACT == 0
#if KT_EXPERT_FAST_EXP  // kt:bind
#if KT_EXPERT_FAST_DIV == 1  // kt:bind
  return __fdividef(v, 1.f + __expf(-v));
#elif KT_EXPERT_FAST_DIV == 2  // kt:bind
  return v * __fdividef(1.f, 1.f + __expf(-v));
#else  // kt:bind
  return v / (1.f + __expf(-v));
#endif  // kt:bind
#else  // kt:bind
  return v / (1.f + expf(-v));
#endif  // kt:bind
#elif KT_EXPERT_ACT == 1
#if KT_EXPERT_ERF_DIV  // kt:bind
  return 0.5f * v * (1.f + erff(v / 1.41421356237f));
#else  // kt:bind
  return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
#endif  // kt:bind
#else
#if KT_EXPERT_TANH  // kt:bind
  float t;  // tanh.approx.f32: one PTX instruction (tanh_opt)
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.79788456080286536f * (v + 0.044715f * v * v * v)));
#if KT_EXPERT_TANH == 2  // kt:bind
  return 0.5f * v * (1.0 + t);  // 1 + t and the product in double (the double literal 1.0), rounded to fp32 once
#else  // kt:bind
  return 0.5f * v * (1.f + t);
#endif  // kt:bind
#else  // kt:bind
  return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
#endif  // kt:bind
#endif
#endif  // kt:bind
}
#if KT_EXPERT_GELU_FORM  // kt:bind

// FasterTransformer / TensorRT-LLM's GeluActivation<half2> (and <__nv_bfloat162>): v a value of T; v^3 by two
// products in T (__hmul2), the tanh argument and 0.5 (1 + tanh) in fp32 (tanh.approx.f32 as tanh_opt has it), the
// cdf rounded to T (__float22half2_rn) and multiplied by v in T (__hmul2).
template <typename T>
__device__ __forceinline__ float gelu_packed(float v) {
  const float v3 = round_t<T>(v * round_t<T>(v * v));
#if KT_EXPERT_GELU_FORM == 1  // kt:bind
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.7978845608028654f * (v + 0.044715f * v3)));
#else  // kt:bind
  const float t = tanhf(0.7978845608028654f * (v + 0.044715f * v3));
#endif  // kt:bind
  return round_t<T>(v * round_t<T>(0.5f * (1.0f + t)));
}
#endif  // kt:bind

#if KT_EXPERT_SATURATE  // kt:bind
// The 16-bit output's largest finite value; every result clamped to it before the store rounds (ExLlamaV3's
// clamp_half2_to_finite clamps the rounded half2: rounding is monotonic and the bound representable, so the same).
template <typename S> struct Finite;
template <> struct Finite<__half> { static constexpr float value = 65504.f; };
template <> struct Finite<__nv_bfloat16> { static constexpr float value = 3.3895313892515355e38f; };
template <typename S, int ITEMS, int VEC>
__device__ __forceinline__ void saturate(const S*, float (&v)[ITEMS][VEC]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i)
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[i][j] = fmaxf(-Finite<S>::value, fminf(v[i][j], Finite<S>::value));
}

#endif  // kt:bind
#if KT_EXPERT_CLAMP  // kt:bind
// gpt-oss's clamped gate: min(gate, limit) (from above only), then gate * sigmoid(alpha * gate) in fp32.
__device__ __forceinline__ float clamped_glu(float g, float alpha, float limit) {
  g = fminf(g, limit);
#if KT_EXPERT_SIGMOID == 1  // kt:bind
  return g * (1.f / (1.f + expf(-alpha * g)));
#elif KT_EXPERT_SIGMOID == 2  // kt:bind
  return g / (1.f + __expf(-alpha * g));
#elif KT_EXPERT_SIGMOID == 3  // kt:bind
  return g * (1.f / (1.f + __expf(-alpha * g)));
#else  // kt:bind
  return g / (1.f + expf(-alpha * g));
#endif  // kt:bind
}

#endif  // kt:bind
#if KT_EXPERT_QUANT  // kt:bind
// fp8 output: a stored value converts with saturation to the finite range, rounding to nearest even (the fp8 types'
// own conversion); the largest finite value of each type for the clamp before it.
template <> __device__ __forceinline__ __nv_fp8_e4m3 from_f<__nv_fp8_e4m3>(float v) { return __nv_fp8_e4m3(v); }
template <> __device__ __forceinline__ __nv_fp8_e5m2 from_f<__nv_fp8_e5m2>(float v) { return __nv_fp8_e5m2(v); }
template <typename O> struct Fp8Max;
template <> struct Fp8Max<__nv_fp8_e4m3> { static constexpr float value = 448.f; };
template <> struct Fp8Max<__nv_fp8_e5m2> { static constexpr float value = 57344.f; };

#endif  // kt:bind
#if KT_EXPERT_OUT_TYPE + KT_EXPERT_CLAMP  // kt:bind
// O: the output's type (T where it is x's); the clamped SwiGLU's alpha, beta and limit after d.
template <typename T, typename O>
#if KT_EXPERT_GATE_LAYOUT == 4  // kt:bind
__device__ __forceinline__ void act_and_mul(O* __restrict__ out, const T* __restrict__ x, const T* __restrict__ y,
#else  // kt:bind
__device__ __forceinline__ void act_and_mul(O* __restrict__ out, const T* __restrict__ x,
#endif  // kt:bind
#if KT_EXPERT_CLAMP  // kt:bind
                                            int d, float alpha, float beta, float limit) {
#elif KT_EXPERT_QUANT  // kt:bind
                                            int d, float scale) {
#elif KT_EXPERT_ACT_LIMIT  // kt:bind
                                            int d, float limit) {
#else  // kt:bind
                                            int d) {
#endif  // kt:bind
#elif KT_EXPERT_GATE_LAYOUT == 4  // kt:bind
template <typename T>
#if KT_EXPERT_INPLACE == 2  // kt:bind
__device__ __forceinline__ void act_and_mul(T* out, const T* __restrict__ x, const T* y,
#elif KT_EXPERT_INPLACE  // kt:bind
__device__ __forceinline__ void act_and_mul(T* out, const T* x, const T* __restrict__ y,
#else  // kt:bind
__device__ __forceinline__ void act_and_mul(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ y,
#endif  // kt:bind
#if KT_EXPERT_BIAS  // kt:bind
                                            const T* __restrict__ bx, const T* __restrict__ by, int d) {
#elif KT_EXPERT_ACT_LIMIT  // kt:bind
                                            int d, float limit) {
#else  // kt:bind
                                            int d) {
#endif  // kt:bind
#elif KT_EXPERT_BIAS == 2  // kt:bind
template <typename T>
__device__ __forceinline__ void act_and_mul(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ bias,
                                            int d) {
#elif KT_EXPERT_GATE_FN == 4  // kt:bind
template <typename T>
__device__ __forceinline__ void act_and_mul(T* __restrict__ out, const T* __restrict__ x, int d, float threshold) {
#elif KT_EXPERT_ACT_LIMIT  // kt:bind
template <typename T>
__device__ __forceinline__ void act_and_mul(T* __restrict__ out, const T* __restrict__ x, int d, float limit) {
#else  // kt:bind
template <typename T>
__device__ __forceinline__ void act_and_mul(T* __restrict__ out, const T* __restrict__ x, int d) {
#endif  // kt:bind
  constexpr int CHUNK = KT_THREADS * KT_VEC * KT_ITEMS;
  const int chunks = (d + CHUNK - 1) / CHUNK;  // blocks per row; consecutive blocks walk memory in order
  const long long row = blockIdx.x / chunks;
  const int base = (int)(blockIdx.x - row * chunks) * CHUNK;
  const int n = d - base;
#if KT_EXPERT_GATE_LAYOUT == 1  // kt:bind
  const T* g = x + row * 2 * d + base;  // [up | gate]: the activation's input is the second half
  const T* a = g + d;
#elif KT_EXPERT_GATE_LAYOUT == 4  // kt:bind
  const T* a = x + row * d + base;  // two tensors: the gate's row in x, the up row in y
  const T* g = y + row * d + base;
#elif KT_EXPERT_GATE_LAYOUT >= 2  // kt:bind
  const T* pairs = x + row * 2 * d + 2 * base;  // interleaved pairs
#else  // kt:bind
  const T* a = x + row * 2 * d + base;
  const T* g = a + d;
#endif  // kt:bind
#if KT_EXPERT_OUT_TYPE + KT_EXPERT_CLAMP  // kt:bind
  O* o = out + row * d + base;
#else  // kt:bind
  T* o = out + row * d + base;
#endif  // kt:bind
#if (KT_EXPERT_OUT_TYPE + KT_EXPERT_CLAMP) * (KT_EXPERT_GATE_LAYOUT == 4)  // kt:bind
  const bool vec = vec_ok<T, KT_VEC>(d, x, y) && vec_ok<O, KT_VEC>(d, out);
#elif KT_EXPERT_OUT_TYPE + KT_EXPERT_CLAMP  // kt:bind
  const bool vec = vec_ok<T, KT_VEC>(d, x) && vec_ok<O, KT_VEC>(d, out);
#elif KT_EXPERT_GATE_LAYOUT == 4  // kt:bind
#if KT_EXPERT_BIAS  // kt:bind
  const bool vec = vec_ok<T, KT_VEC>(d, x, out, y) && vec_ok<T, KT_VEC>(d, bx, by);
#else  // kt:bind
  const bool vec = vec_ok<T, KT_VEC>(d, x, out, y);
#endif  // kt:bind
#elif KT_EXPERT_BIAS == 2  // kt:bind
  const bool vec = vec_ok<T, KT_VEC>(d, x, out, bias);
#else  // kt:bind
  const bool vec = vec_ok<T, KT_VEC>(d, x, out);
#endif  // kt:bind
  float va[KT_ITEMS][KT_VEC], vg[KT_ITEMS][KT_VEC];
#if KT_EXPERT_GATE_LAYOUT / 2 == 1  // kt:bind
  pair_load<KT_THREADS, KT_VEC, KT_ITEMS, KT_EXPERT_GATE_LAYOUT == 3>(pairs, n, vec, va, vg);
#elif KT_EXPERT_BIAS == 2  // kt:bind
  // the bias [2 * d] laid out as the row: each half's columns of it added to that half, each sum rounded to T
  row_load<KT_THREADS, KT_VEC, KT_ITEMS>(a, n, vec, va);
  row_load<KT_THREADS, KT_VEC, KT_ITEMS>(g, n, vec, vg);
  {
    float ba[KT_ITEMS][KT_VEC], bg[KT_ITEMS][KT_VEC];
#if KT_EXPERT_GATE_LAYOUT == 1  // kt:bind
    row_load<KT_THREADS, KT_VEC, KT_ITEMS>(bias + d + base, n, vec, ba);  // [up | gate]: the gate's bias second
    row_load<KT_THREADS, KT_VEC, KT_ITEMS>(bias + base, n, vec, bg);
#else  // kt:bind
    row_load<KT_THREADS, KT_VEC, KT_ITEMS>(bias + base, n, vec, ba);
    row_load<KT_THREADS, KT_VEC, KT_ITEMS>(bias + d + base, n, vec, bg);
#endif  // kt:bind
#pragma unroll
    for (int i = 0; i < KT_ITEMS; ++i)
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) {
        va[i][j] = round_t<T>(va[i][j] + ba[i][j]);
        vg[i][j] = round_t<T>(vg[i][j] + bg[i][j]);
      }
  }
#elif KT_EXPERT_BIAS  // kt:bind
  // the biases [d] at the chunk's columns, each added (rounded to T) where it is not null; y may be null
  const bool gated = y != nullptr;
  row_load<KT_THREADS, KT_VEC, KT_ITEMS>(a, n, vec, va);
  if (bx != nullptr) {
    float vb[KT_ITEMS][KT_VEC];
    row_load<KT_THREADS, KT_VEC, KT_ITEMS>(bx + base, n, vec, vb);
#pragma unroll
    for (int i = 0; i < KT_ITEMS; ++i)
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) va[i][j] = round_t<T>(va[i][j] + vb[i][j]);
  }
  if (gated) {
    row_load<KT_THREADS, KT_VEC, KT_ITEMS>(g, n, vec, vg);
    if (by != nullptr) {
      float vb[KT_ITEMS][KT_VEC];
      row_load<KT_THREADS, KT_VEC, KT_ITEMS>(by + base, n, vec, vb);
#pragma unroll
      for (int i = 0; i < KT_ITEMS; ++i)
#pragma unroll
        for (int j = 0; j < KT_VEC; ++j) vg[i][j] = round_t<T>(vg[i][j] + vb[i][j]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < KT_ITEMS; ++i)
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) vg[i][j] = 1.f;  // no gate: act(x) alone (times 1, exact)
  }
#else  // kt:bind
  row_load<KT_THREADS, KT_VEC, KT_ITEMS>(a, n, vec, va);
  row_load<KT_THREADS, KT_VEC, KT_ITEMS>(g, n, vec, vg);
#endif  // kt:bind
#pragma unroll
  for (int i = 0; i < KT_ITEMS; ++i)
#pragma unroll
#if KT_EXPERT_CLAMP * (KT_EXPERT_ROUND_ACT == 0)  // kt:bind
    for (int j = 0; j < KT_VEC; ++j)
      va[i][j] = (fminf(fmaxf(vg[i][j], -limit), limit) + beta) * clamped_glu(va[i][j], alpha, limit);
#elif KT_EXPERT_CLAMP  // kt:bind
    for (int j = 0; j < KT_VEC; ++j)
      va[i][j] = (fminf(fmaxf(vg[i][j], -limit), limit) + beta) * round_t<T>(clamped_glu(va[i][j], alpha, limit));
#else  // kt:bind
#if KT_EXPERT_GELU_FORM  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) va[i][j] = gelu_packed<T>(va[i][j]) * vg[i][j];
#elif KT_EXPERT_GATE_FN == 4  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) va[i][j] = (va[i][j] > threshold ? va[i][j] : 0.f) * vg[i][j];
#elif KT_EXPERT_ACT_LIMIT  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) {
#if KT_EXPERT_ROUND_ACT == 0  // kt:bind
      float act = gate_act(va[i][j]), up = vg[i][j];
#else  // kt:bind
      float act = round_t<T>(gate_act(va[i][j])), up = vg[i][j];
#endif  // kt:bind
      if (limit != 0.f) {  // act_limit (0: off): up to [-limit, limit], the activation from above
        if (up < -limit) up = -limit;
        if (up > limit) up = limit;
        if (act > limit) act = limit;
      }
      va[i][j] = act * up;
    }
#elif KT_EXPERT_ROUND_ACT == 0  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) va[i][j] = gate_act(va[i][j]) * vg[i][j];
#else  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) va[i][j] = round_t<T>(gate_act(va[i][j])) * vg[i][j];
#endif  // kt:bind
#endif  // kt:bind
#if KT_EXPERT_QUANT  // kt:bind
#if KT_EXPERT_QUANT == 1  // kt:bind
  const float qs = 1.f / scale;  // once, as the original's one division per thread
#endif  // kt:bind
#pragma unroll
  for (int i = 0; i < KT_ITEMS; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
#if KT_EXPERT_QUANT_ROUND  // kt:bind
      const float y = round_t<T>(va[i][j]);
#else  // kt:bind
      const float y = va[i][j];
#endif  // kt:bind
#if KT_EXPERT_QUANT == 1  // kt:bind
      const float q = y * qs;
#elif KT_EXPERT_QUANT == 2  // kt:bind
      const float q = y / scale;
#else  // kt:bind
      const float q = y * scale;
#endif  // kt:bind
      va[i][j] = fmaxf(-Fp8Max<O>::value, fminf(q, Fp8Max<O>::value));  // then converted by the store
    }
#endif  // kt:bind
#if KT_EXPERT_SATURATE  // kt:bind
  saturate(o, va);
#endif  // kt:bind
  row_store<KT_THREADS, KT_VEC, KT_ITEMS>(o, n, vec, va);
}

}  // namespace kt
