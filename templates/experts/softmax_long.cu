/* kerntune-expert:
name = "softmax_long"
family = "softmax"
description = "Row softmax for rows longer than a block's registers hold (a vocabulary of logits: 32k-256k). One block per row, two reads of it: an online pass (each thread a running max and a sum of expf(x - max), rescaled when its max grows; then one block reduction of the pairs) and the normalized write. 16-byte loads where the pointers are aligned (a row of odd length: its first and last few elements scalar), scalar accesses otherwise; expf kept like softmax. The screening hands a binding of softmax over to this expert where softmax has no configuration that holds the row."
function = "kt::softmax_long"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "rows: i32", "hidden: i32"]
constraints = ["VEC * ESIZE <= 16"]
helpers = ["_logits.cuh"]

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

[launch]
grid = ["rows"]
block = ["THREADS"]
bounds = "THREADS"
min_blocks = "1"
smem = "0"
*/
// kt:bind KT_EXPERT_GENERAL = 0  (0: softmax(x) stored as the input's type; 1: softmax(x * scale / row_div[row]) stored as a type of its own)
#ifndef KT_THREADS
#define KT_THREADS 1024
#endif
#ifndef KT_VEC
#define KT_VEC 4
#endif
#ifndef KT_UNROLL
#define KT_UNROLL 2
#endif

namespace kt {

// Fold N values into a running (max m, sum s of expf(v - m)): one rescale of s per call, where the max grows.
template <int N>
__device__ __forceinline__ void online_fold(float& m, float& s, const float (&v)[N], int valid) {
  float mv = m;
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (j < valid) mv = fmaxf(mv, v[j]);
  if (mv == -INFINITY) return;  // nothing finite yet
  if (mv > m) {
    s *= expf(m - mv);  // m = -inf: expf(-inf) = 0, and s is 0 then
    m = mv;
  }
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (j < valid) s += expf(v[j] - m);
}

// The row's max and sum of expf(x - max) from each thread's running pair: every thread gets both.
__device__ __forceinline__ void online_reduce(float& m, float& s) {
  const float mrow = row_reduce<0, 1, 0>(m, Max(), -INFINITY);
  const float mine = m == -INFINITY ? 0.f : s * expf(m - mrow);
  s = row_reduce<0, 1, 1>(mine, Sum(), 0.f);
  m = mrow;
}

// The vector path's split of a row whose pointers sit `lead` elements past an aligned address (lead = the row's
// offset mod VEC, the same for every row buffer when their bases are aligned): `head` elements up to the first
// aligned one, a body of whole vectors, then `tail` elements; head and tail (fewer than VEC each) are scalar.
struct RowSplit {
  int head, body, tail;
  __device__ __forceinline__ RowSplit(int hidden, int lead) {
    head = min((KT_VEC - lead) % KT_VEC, hidden);
    body = (hidden - head) / KT_VEC * KT_VEC;
    tail = hidden - head - body;
  }
};

// Pass 1 over the row (FN: the logit of a loaded value), then the row's (max, sum). The vector path reads the
// RowSplit body in whole vectors; thread 0 takes the head and thread 1 the tail as one short vector each, through
// the same fold as the last whole vectors (one copy of the fold's code: a second one made ptxas spill at 1024
// threads).
template <typename T, typename FN>
__device__ __forceinline__ void online_pass(const T* __restrict__ xr, int hidden, bool vec, int lead, FN fn, float& m,
                                            float& s) {
  m = -INFINITY;
  s = 0.f;
  if (vec) {
    const RowSplit rs(hidden, lead);
    const T* __restrict__ xb = xr + rs.head;
    const int step = (int)blockDim.x * KT_VEC, t = (int)threadIdx.x;
    int i = t * KT_VEC;
    for (; KT_UNROLL > 1 && i + (KT_UNROLL - 1) * step < rs.body; i += KT_UNROLL * step) {  // KT_UNROLL in flight
      float v[KT_UNROLL][KT_VEC];
#pragma unroll
      for (int u = 0; u < KT_UNROLL; ++u) load_vec<T, KT_VEC>(xb + i + u * step, v[u]);
#pragma unroll
      for (int u = 0; u < KT_UNROLL; ++u) {
#pragma unroll
        for (int j = 0; j < KT_VEC; ++j) v[u][j] = fn(v[u][j]);
        online_fold<KT_VEC>(m, s, v[u], KT_VEC);
      }
    }
    int extra = t == 0 ? rs.head : t == 1 ? rs.tail : 0;  // the peeled elements this thread still has to fold
    const T* __restrict__ xe = t == 0 ? xr : xb + rs.body;
    for (;;) {
      float v[KT_VEC];
      int valid = KT_VEC;
      if (i < rs.body) {
        load_vec<T, KT_VEC>(xb + i, v);
        i += step;
      } else if (extra > 0) {
#pragma unroll
        for (int j = 0; j < KT_VEC; ++j) v[j] = j < extra ? to_f(xe[j]) : 0.f;
        valid = extra;
        extra = 0;
      } else {
        break;
      }
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) v[j] = fn(v[j]);
      online_fold<KT_VEC>(m, s, v, valid);
    }
  } else {
    for (int i = (int)threadIdx.x; i < hidden; i += (int)blockDim.x) {
      float v[1] = {fn(to_f(xr[i]))};
      online_fold<1>(m, s, v, 1);
    }
  }
  online_reduce(m, s);
}

// Pass 2: out = expf(logit - m) / s, as a multiply by the reciprocal (one division per row, not per element).
// The peeled head and tail as in online_pass.
template <typename T, typename O, typename FN>
__device__ __forceinline__ void normalized_pass(O* __restrict__ yr, const T* __restrict__ xr, int hidden, bool vec,
                                                int lead, FN fn, float m, float s) {
  const float inv = 1.f / s;
  if (vec) {
    const RowSplit rs(hidden, lead);
    const int step = (int)blockDim.x * KT_VEC, t = (int)threadIdx.x;
    const T* __restrict__ xb = xr + rs.head;
    O* __restrict__ yb = yr + rs.head;
    int extra = t == 0 ? rs.head : t == 1 ? rs.tail : 0;  // the peeled elements, as in online_pass
    const int e0 = t == 0 ? 0 : rs.head + rs.body;
#pragma unroll 2
    for (int i = t * KT_VEC;;) {
      float v[KT_VEC];
      const bool whole = i < rs.body;
      if (whole) {
        load_vec<T, KT_VEC>(xb + i, v);
      } else if (extra > 0) {
#pragma unroll
        for (int j = 0; j < KT_VEC; ++j) v[j] = j < extra ? to_f(xr[e0 + j]) : 0.f;
      } else {
        break;
      }
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) v[j] = expf(fn(v[j]) - m) * inv;
      if (whole) {
        store_vec<O, KT_VEC>(yb + i, v);
        i += step;
      } else {
#pragma unroll
        for (int j = 0; j < KT_VEC; ++j)
          if (j < extra) yr[e0 + j] = from_f<O>(v[j]);
        extra = 0;
      }
    }
  } else {
    for (int i = (int)threadIdx.x; i < hidden; i += (int)blockDim.x) yr[i] = from_f<O>(expf(fn(to_f(xr[i])) - m) * inv);
  }
}

#if KT_EXPERT_GENERAL == 0  // kt:bind
template <typename T>
__device__ __forceinline__ void softmax_long(T* out, const T* x, int rows, int hidden) {
  const int row = blockIdx.x;
  if (row >= rows) return;  // the whole block: one row per block
  const long long off = (long long)row * hidden;
  const bool vec = vec_ok<T, KT_VEC>(0, x, out);  // aligned bases: whole vectors, odd rows peeled (RowSplit)
  const int lead = (int)(off % KT_VEC);
  float m, s;
  online_pass<T>(x + off, hidden, vec, lead, LogitIdentity(), m, s);
  normalized_pass<T, T>(out + off, x + off, hidden, vec, lead, LogitIdentity(), m, s);
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
    const LogitScaleDiv fn{scale, row_div[row]};
    online_pass<T>(x + off, hidden, vec, lead, fn, m, s);
    normalized_pass<T, O>(out + off, x + off, hidden, vec, lead, fn, m, s);
  } else {
    const LogitScale fn{scale};
    online_pass<T>(x + off, hidden, vec, lead, fn, m, s);
    normalized_pass<T, O>(out + off, x + off, hidden, vec, lead, fn, m, s);
  }
}
#endif  // kt:bind

}  // namespace kt
