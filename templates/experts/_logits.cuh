// kerntune expert templates: the logit a softmax expert works on, from a loaded value (an expert that lists this
// file in `helpers` gets it inside its own `namespace kt {`). The general softmax convention is
// softmax(x * scale / row_div[row]): LogitScaleDiv where there is a per-row divisor, LogitScale where there is none,
// LogitIdentity for the plain softmax.
struct LogitIdentity { __device__ __forceinline__ float operator()(float v) const { return v; } };
struct LogitScale {
  float k;
  __device__ __forceinline__ float operator()(float v) const { return v * k; }
};
struct LogitScaleDiv {  // the same arithmetic as softmax: x * scale / div
  float scale, div;
  __device__ __forceinline__ float operator()(float v) const { return v * scale / div; }
};
