// kerntune expert templates: the logit a softmax expert works on, from a loaded value (an expert that lists this
// file in `helpers` gets it inside its own `namespace kt {`). The general softmax convention is
// softmax(x * scale / row_div[row]) (or x / scale): LogitScaleDiv where there is a per-row divisor, LogitScale
// where there is none, LogitIdentity for the plain softmax.
struct LogitIdentity { __device__ __forceinline__ float operator()(float v) const { return v; } };
// x / d rounded as the division `x / d` rounds (IEEE, to nearest), with d's reciprocal taken once: q = x * r, then one
// correction step (Markstein: r = 1/d correctly rounded, the remainder x - q * d by fma) gives the correctly rounded
// quotient wherever |x| and |d| lie in [2^-60, 2^60] (no underflow or overflow on the way). Zeros, infinities (a
// masked logit) and NaNs take q = x * r, which is x / d for them (a -0 may come out +0); so do a finite |x| or a d
// outside that range (no logit or temperature is), within an ulp or two of x / d for a normal d. Six instructions
// an element and no branch, against the division's ten and a branch.
struct Div {
  float d, r, lo;  // lo: 2^-60, or +inf for a d outside the range (every x then takes q)
  __device__ __forceinline__ explicit Div(float d_)
      : d(d_), r(1.f / d_), lo(fabsf(d_) >= 0x1p-60f && fabsf(d_) <= 0x1p60f ? 0x1p-60f : INFINITY) {}
  __device__ __forceinline__ float operator()(float x) const {
    const float q = x * r, a = fabsf(x);
    const float c = fmaf(fmaf(-q, d, x), r, q);
    return a >= lo && a <= 0x1p60f ? c : q;
  }
};
// DIVIDE: the expert's KT_EXPERT_LOGIT_DIVIDE: 1 where the kernel divides by its scale (a temperature passed by
// value: x / scale, the kernel's own rounding), 0 where it multiplies.
template <int DIVIDE>
struct LogitScale {
  Div k;  // k.d: the scale
  __device__ __forceinline__ LogitScale(float k_) : k(k_) {}
  __device__ __forceinline__ float operator()(float v) const { return DIVIDE ? k(v) : v * k.d; }
};
template <int DIVIDE>
struct LogitScaleDiv {  // the same arithmetic as softmax: x * scale / div (x / scale / div)
  Div scale, div;  // .d: the scale, the row's divisor
  __device__ __forceinline__ LogitScaleDiv(float scale_, float div_) : scale(scale_), div(div_) {}
  __device__ __forceinline__ float operator()(float v) const { return div(DIVIDE ? scale(v) : v * scale.d); }
};
