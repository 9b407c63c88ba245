// kerntune expert templates: the logit a softmax expert works on, from a loaded value (an expert that lists this
// file in `helpers` gets it inside its own `namespace kt {`). The general softmax convention is
// softmax(x * scale / row_div[row]) (or x / scale): LogitScaleDiv where there is a per-row divisor, LogitScale
// where there is none, LogitIdentity for the plain softmax.
struct LogitIdentity { __device__ __forceinline__ float operator()(float v) const { return v; } };
// DIVIDE: the expert's KT_EXPERT_LOGIT_DIVIDE: 1 where the kernel divides by its scale (a temperature passed by
// value: x / scale, the kernel's own rounding), 0 where it multiplies.
template <int DIVIDE>
struct LogitScale {
  float k;
  __device__ __forceinline__ float operator()(float v) const { return DIVIDE ? v / k : v * k; }
};
template <int DIVIDE>
struct LogitScaleDiv {  // the same arithmetic as softmax: x * scale / div (x / scale / div)
  float scale, div;
  __device__ __forceinline__ float operator()(float v) const { return (DIVIDE ? v / scale : v * scale) / div; }
};
