/* kerntune-expert:
name = "softmax_long"
family = "softmax"
description = "Row softmax for rows longer than a block's registers hold (a vocabulary of logits: 32k-256k). One block per row, two reads of it: an online pass (each thread a running max and a sum of expf(x - max), rescaled when its max grows; then one block reduction of the pairs) and the normalized write. 16-byte loads where the pointers are aligned (a row of odd length: its first and last few elements scalar), scalar accesses otherwise; expf like softmax, or the hardware's 2^x where FAST_MATH is on and verification keeps it; a division by a temperature as its reciprocal and one correction (the division's rounding, _logits.cuh); the second read and the write streaming. The screening hands a binding of softmax over to this expert where softmax has no configuration that holds the row."
function = "kt::softmax_long"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "rows: i32", "hidden: i32"]
constraints = ["VEC * ESIZE <= 16"]
helpers = ["_logits.cuh", "_online.cuh"]

[params.THREADS]
values = [128, 256, 512, 1024]
default = 1024
kind = "block_size"
why = "threads per row (one block per row): more threads keep more of the row's loads in flight"

[params.VEC]
values = [1, 2, 4, 8]
default = 4
kind = "vector_width"
why = "elements per load/store: 16 bytes at most; the kernel falls back to scalar accesses when the row or a pointer is not aligned"

[params.UNROLL]
values = [1, 2, 4]
default = 2
kind = "unroll"
why = "vectors each thread loads before it folds them into its running max and sum (loads in flight per thread)"

[params.FAST_MATH]
values = [0, 1]
default = 0
kind = "fast_math"
why = "the exponentials of the two passes (one or two an element): 0 expf; 1 the hardware's 2^x of d * log2(e) (ex2.approx: two instructions against about eight, within a few ulp; the H100 moved vocabulary rows 5-12% faster with it); verification at the spec's tolerance keeps it or not"

[launch]
grid = ["rows"]
block = ["THREADS"]
bounds = "THREADS"
min_blocks = "1"
smem = "0"
*/
// kt:bind KT_EXPERT_LOGIT_DIVIDE = 0  (general form: 0: the logits times scale; 1: divided by it (a temperature passed by value), the kernel's own rounding)
// kt:bind KT_EXPERT_GENERAL = 0  (0: softmax(x) stored as the input's type; 1: softmax(x * scale / row_div[row]) stored as a type of its own)
// kt:bind KT_EXPERT_LOG = 0  (general form. 0: the probabilities exp(l - m) / s; 1: the log-probabilities l - (m + logf(s)), l the logit, m the row's max, s the sum of exp(l - m): the row's log-sum-exp taken once in fp32 and subtracted from each logit, one store (PyTorch's LogSoftMax, FasterTransformer / TensorRT-LLM's beam-search log-softmax, the log-probs vLLM and SGLang return))
// kt:bind KT_EXPERT_X_STRIDE = 0  (general form. 0: the input rows hidden elements apart; 1: x_stride elements apart (the last argument, x_stride >= hidden): the logits of a vocabulary padded past its hidden real columns (TensorRT-LLM's vocab_size_padded), the output rows contiguous; 2: the input AND output rows x_stride elements apart, the first hidden of each softmaxed and the rest neither read nor written (llama2.c's decode attention scores [n_heads, max_seq_len] softmaxed in place over the first pos + 1))
#ifndef KT_THREADS
#define KT_THREADS 1024
#endif
#ifndef KT_VEC
#define KT_VEC 4
#endif
#ifndef KT_UNROLL
#define KT_UNROLL 2
#endif
#ifndef KT_FAST_MATH
#define KT_FAST_MATH 0
#endif

namespace kt {

// The two reads of a row (online_pass, then normalized_pass) are the helpers of _online.cuh, shared with
// softmax_long_cluster's STAGE 1.

#if KT_EXPERT_GENERAL == 0  // kt:bind
template <typename T>
__device__ __forceinline__ void softmax_long(T* out, const T* x, int rows, int hidden) {
  const int row = blockIdx.x;
  if (row >= rows) return;  // the whole block: one row per block
  const long long off = (long long)row * hidden;
  const bool vec = vec_ok<T, KT_VEC>(0, x, out);  // aligned bases: whole vectors, odd rows peeled (RowSplit)
  const int lead = (int)(off % KT_VEC);
  float m, s;
  online_pass<KT_VEC, KT_UNROLL, KT_FAST_MATH, T>(x + off, hidden, vec, lead, LogitIdentity(), m, s);
  normalized_pass<KT_VEC, KT_FAST_MATH, T, T>(out + off, x + off, hidden, vec, lead, LogitIdentity(), m, s);
}
#elif KT_EXPERT_LOG + KT_EXPERT_X_STRIDE  // kt:bind
#if KT_EXPERT_LOG  // kt:bind
// Pass 2 of the log form: out = l - lse, lse = m + logf(s) the row's log-sum-exp (taken once), l the logit. The
// output in whole vectors where its base is aligned (its head and tail scalar), the input in vectors too where it
// shares the output's lead (`same`), else element by element; streaming, as normalized_pass.
template <int VEC, typename T, typename O, typename FN>
__device__ __forceinline__ void log_pass(O* __restrict__ yr, const T* __restrict__ xr, int hidden, bool ovec,
                                         bool same, int lead, FN fn, float lse) {
  const int t = (int)threadIdx.x;
  if (ovec) {
    const RowSplit<VEC> rs(hidden, lead);
    const int step = (int)blockDim.x * VEC, e0 = rs.head + rs.body;
    if (t < rs.head) yr[t] = from_f<O>(fn(to_f(xr[t])) - lse);
    if (t < rs.tail) yr[e0 + t] = from_f<O>(fn(to_f(xr[e0 + t])) - lse);
    const T* __restrict__ xb = xr + rs.head;
    O* __restrict__ yb = yr + rs.head;
#pragma unroll 2
    for (int i = t * VEC; i < rs.body; i += step) {
      float v[VEC];
      if (same) {
        load_vec_cs<T, VEC>(xb + i, v);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = to_f(xb[i + j]);
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = fn(v[j]) - lse;
      store_vec_cs<O, VEC>(yb + i, v);
    }
  } else {
    for (int i = t; i < hidden; i += (int)blockDim.x) yr[i] = from_f<O>(fn(to_f(xr[i])) - lse);
  }
}

#endif  // kt:bind
// The general form (softmax(x * scale / row_div[row]), row_div null: no division, written to O) with the
// log-probabilities out (LOG) and/or the input rows x_stride elements apart (X_STRIDE: a padded vocabulary; the
// output rows contiguous). Pass 1 reads the input alone, vectors at its own lead; pass 2 as the output allows.
template <typename T, typename O>
#if KT_EXPERT_X_STRIDE  // kt:bind
__device__ __forceinline__ void softmax_long(O* out, const T* x, int rows, int hidden, float scale,
                                             const float* row_div, long long x_stride) {
#else  // kt:bind
__device__ __forceinline__ void softmax_long(O* out, const T* x, int rows, int hidden, float scale,
                                             const float* row_div) {
  const long long x_stride = hidden;
#endif  // kt:bind
  const int row = blockIdx.x;
  if (row >= rows) return;  // the whole block: one row per block
#if KT_EXPERT_X_STRIDE == 2  // kt:bind
  const long long off = (long long)row * x_stride, xoff = off;  // the output rows at the input's stride
  const bool xvec = vec_ok<T, KT_VEC>(0, x), ovec = vec_ok<O, KT_VEC>(0, out);
  const bool same = xvec;  // every input row at its output row's lead
#else  // kt:bind
  const long long off = (long long)row * hidden, xoff = (long long)row * x_stride;
  const bool xvec = vec_ok<T, KT_VEC>(0, x), ovec = vec_ok<O, KT_VEC>(0, out);
  const bool same = xvec && (x_stride - hidden) % KT_VEC == 0;  // every input row at its output row's lead
#endif  // kt:bind
  const int xlead = (int)(xoff % KT_VEC), lead = (int)(off % KT_VEC);
  float m, s;
  if (row_div != nullptr) {
    const LogitScaleDiv<KT_EXPERT_LOGIT_DIVIDE> fn{scale, row_div[row]};
    online_pass<KT_VEC, KT_UNROLL, KT_FAST_MATH, T>(x + xoff, hidden, xvec, xlead, fn, m, s);
#if KT_EXPERT_LOG  // kt:bind
    log_pass<KT_VEC, T, O>(out + off, x + xoff, hidden, ovec, same, lead, fn, m + logf(s));
#else  // kt:bind
    normalized_pass<KT_VEC, KT_FAST_MATH, T, O>(out + off, x + xoff, hidden, ovec && same, lead, fn, m, s);
#endif  // kt:bind
  } else {
    const LogitScale<KT_EXPERT_LOGIT_DIVIDE> fn{scale};
    online_pass<KT_VEC, KT_UNROLL, KT_FAST_MATH, T>(x + xoff, hidden, xvec, xlead, fn, m, s);
#if KT_EXPERT_LOG  // kt:bind
    log_pass<KT_VEC, T, O>(out + off, x + xoff, hidden, ovec, same, lead, fn, m + logf(s));
#else  // kt:bind
    normalized_pass<KT_VEC, KT_FAST_MATH, T, O>(out + off, x + xoff, hidden, ovec && same, lead, fn, m, s);
#endif  // kt:bind
  }
}
#else  // kt:bind
// The general form: softmax(x * scale / row_div[row]) (row_div null: no division) written to O, which may differ
// from the input's type (fp16 logits to fp32 probabilities).
template <typename T, typename O>
__device__ __forceinline__ void softmax_long(O* out, const T* x, int rows, int hidden, float scale,
                                             const float* row_div) {
  const int row = blockIdx.x;
  if (row >= rows) return;  // the whole block: one row per block
  const long long off = (long long)row * hidden;
  const bool vec = vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out);  // aligned bases; odd rows peeled
  const int lead = (int)(off % KT_VEC);
  float m, s;
  if (row_div != nullptr) {
    const LogitScaleDiv<KT_EXPERT_LOGIT_DIVIDE> fn{scale, row_div[row]};
    online_pass<KT_VEC, KT_UNROLL, KT_FAST_MATH, T>(x + off, hidden, vec, lead, fn, m, s);
    normalized_pass<KT_VEC, KT_FAST_MATH, T, O>(out + off, x + off, hidden, vec, lead, fn, m, s);
  } else {
    const LogitScale<KT_EXPERT_LOGIT_DIVIDE> fn{scale};
    online_pass<KT_VEC, KT_UNROLL, KT_FAST_MATH, T>(x + off, hidden, vec, lead, fn, m, s);
    normalized_pass<KT_VEC, KT_FAST_MATH, T, O>(out + off, x + off, hidden, vec, lead, fn, m, s);
  }
}
#endif  // kt:bind

}  // namespace kt
