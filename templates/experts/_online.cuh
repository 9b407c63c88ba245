// kerntune expert templates: the two reads of an online softmax over a stretch of a row (an expert that lists this
// file in `helpers` gets it inside its own `namespace kt {`, after _common.cuh and after _logits.cuh where that
// comes first). softmax_long runs them over a whole row, one block per row; softmax_long_cluster (STAGE 1) over
// the slice of a row one block of a cluster works on. VEC (elements per access) and UNROLL (vectors a thread loads
// before it folds them) are template parameters: the helpers read no macro of the expert's.

// exp(d) of an exponent relative to a max (d <= 0, -inf for a masked logit). FAST 0: expf. FAST 1 (an expert's
// FAST_MATH, which verification at the spec's tolerance keeps or not): the hardware's
// 2^x (ex2.approx.ftz) of d * log2(e): two instructions against expf's eight or so, within about 2 ulp plus the
// rounding of d * log2(e) (a relative error of 1e-6 at d = -20), a result below 2^-126 flushed to 0.
template <int FAST>
__device__ __forceinline__ float exp_rel(float d) {
  if constexpr (FAST == 1) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(d * 1.4426950408889634f));
    return y;
  } else {
    return expf(d);
  }
}

// The unsigned type of B bytes that __ldcs and __stcs move (a vector of VEC elements of T: B = VEC * sizeof(T)).
template <int B> struct Bits;
template <> struct Bits<2> { using type = unsigned short; };
template <> struct Bits<4> { using type = unsigned int; };
template <> struct Bits<8> { using type = uint2; };
template <> struct Bits<16> { using type = uint4; };

// load_vec / store_vec streaming (ld.global.cs / st.global.cs: the line is the first L2 evicts): the second read of
// a stretch and the normalized write, so that they do not push out of L2 the stretches other blocks have read
// once and will read again. On the H100 (vocabulary rows of 32k-152k) 3-16% faster on most shapes, at most 3%
// slower on two.
// (B's alignment is its size, that of Vec<T, VEC>: load_vec / store_vec convert through the local word.)
template <typename T, int VEC>
__device__ __forceinline__ void load_vec_cs(const T* p, float (&out)[VEC]) {
  using B = typename Bits<sizeof(T) * VEC>::type;
  const B b = __ldcs(reinterpret_cast<const B*>(p));
  load_vec<T, VEC>(reinterpret_cast<const T*>(&b), out);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec_cs(T* p, const float (&in)[VEC]) {
  using B = typename Bits<sizeof(T) * VEC>::type;
  B b;
  store_vec<T, VEC>(reinterpret_cast<T*>(&b), in);
  __stcs(reinterpret_cast<B*>(p), b);
}

// Fold N values into a running (max m, sum s of exp(v - m)): one rescale of s per call, where the max grows.
template <int N, int FAST>
__device__ __forceinline__ void online_fold(float& m, float& s, const float (&v)[N], int valid) {
  float mv = m;
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (j < valid) mv = fmaxf(mv, v[j]);
  if (mv == -INFINITY) return;  // nothing finite yet
  if (mv > m) {
    s *= exp_rel<FAST>(m - mv);  // m = -inf: exp(-inf) = 0, and s is 0 then
    m = mv;
  }
#pragma unroll
  for (int j = 0; j < N; ++j)
    if (j < valid) s += exp_rel<FAST>(v[j] - m);
}

// The block's max and sum of expf(x - max) from each thread's running pair: every thread gets both.
__device__ __forceinline__ void online_reduce(float& m, float& s) {
  const float mrow = row_reduce<0, 1, 0>(m, Max(), -INFINITY);
  const float mine = m == -INFINITY ? 0.f : s * expf(m - mrow);
  s = row_reduce<0, 1, 1>(mine, Sum(), 0.f);
  m = mrow;
}

// The vector path's split of a row whose pointers sit `lead` elements past an aligned address (lead = the row's
// offset mod VEC, the same for every row buffer when their bases are aligned): `head` elements up to the first
// aligned one, a body of whole vectors, then `tail` elements; head and tail (fewer than VEC each) are scalar.
template <int VEC>
struct RowSplit {
  int head, body, tail;
  __device__ __forceinline__ RowSplit(int hidden, int lead) {
    head = min((VEC - lead) % VEC, hidden);
    body = (hidden - head) / VEC * VEC;
    tail = hidden - head - body;
  }
};

// Pass 1 over the row (FN: the logit of a loaded value), then the block's (max, sum). The vector path reads the
// RowSplit body in whole vectors; thread 0 takes the head and thread 1 the tail as one short vector each, through
// the same fold as the last whole vectors (one copy of the fold's code: a second one made ptxas spill at 1024
// threads).
template <int VEC, int UNROLL, int FAST, typename T, typename FN>
__device__ __forceinline__ void online_pass(const T* __restrict__ xr, int hidden, bool vec, int lead, FN fn, float& m,
                                            float& s) {
  m = -INFINITY;
  s = 0.f;
  if (vec) {
    const RowSplit<VEC> rs(hidden, lead);
    const T* __restrict__ xb = xr + rs.head;
    const int step = (int)blockDim.x * VEC, t = (int)threadIdx.x;
    int i = t * VEC;
    for (; UNROLL > 1 && i + (UNROLL - 1) * step < rs.body; i += UNROLL * step) {  // UNROLL in flight
      float v[UNROLL][VEC];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) load_vec<T, VEC>(xb + i + u * step, v[u]);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[u][j] = fn(v[u][j]);
        online_fold<VEC, FAST>(m, s, v[u], VEC);
      }
    }
    int extra = t == 0 ? rs.head : t == 1 ? rs.tail : 0;  // the peeled elements this thread still has to fold
    const T* __restrict__ xe = t == 0 ? xr : xb + rs.body;
    for (;;) {
      float v[VEC];
      int valid = VEC;
      if (i < rs.body) {
        load_vec<T, VEC>(xb + i, v);
        i += step;
      } else if (extra > 0) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = j < extra ? to_f(xe[j]) : 0.f;
        valid = extra;
        extra = 0;
      } else {
        break;
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = fn(v[j]);
      online_fold<VEC, FAST>(m, s, v, valid);
    }
  } else {
    for (int i = (int)threadIdx.x; i < hidden; i += (int)blockDim.x) {
      float v[1] = {fn(to_f(xr[i]))};
      online_fold<1, FAST>(m, s, v, 1);
    }
  }
  online_reduce(m, s);
}

// Pass 2: out = exp(logit - m) / s, as a multiply by the reciprocal (one division per row, not per element).
// The peeled head and tail as in online_pass; the vector loads and stores streaming (load_vec_cs).
template <int VEC, int FAST, typename T, typename O, typename FN>
__device__ __forceinline__ void normalized_pass(O* __restrict__ yr, const T* __restrict__ xr, int hidden, bool vec,
                                                int lead, FN fn, float m, float s) {
  const float inv = 1.f / s;
  if (vec) {
    const RowSplit<VEC> rs(hidden, lead);
    const int step = (int)blockDim.x * VEC, t = (int)threadIdx.x;
    const T* __restrict__ xb = xr + rs.head;
    O* __restrict__ yb = yr + rs.head;
    int extra = t == 0 ? rs.head : t == 1 ? rs.tail : 0;  // the peeled elements, as in online_pass
    const int e0 = t == 0 ? 0 : rs.head + rs.body;
#pragma unroll 2
    for (int i = t * VEC;;) {
      float v[VEC];
      const bool whole = i < rs.body;
      if (whole) {
        load_vec_cs<T, VEC>(xb + i, v);
      } else if (extra > 0) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = j < extra ? to_f(xr[e0 + j]) : 0.f;
      } else {
        break;
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = exp_rel<FAST>(fn(v[j]) - m) * inv;
      if (whole) {
        store_vec_cs<O, VEC>(yb + i, v);
        i += step;
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          if (j < extra) yr[e0 + j] = from_f<O>(v[j]);
        extra = 0;
      }
    }
  } else {
    for (int i = (int)threadIdx.x; i < hidden; i += (int)blockDim.x) yr[i] = from_f<O>(exp_rel<FAST>(fn(to_f(xr[i])) - m) * inv);
  }
}
