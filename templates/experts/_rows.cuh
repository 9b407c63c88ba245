// kerntune expert templates: the row paths of the experts that hold a row in registers (an expert that lists this
// file in `helpers` gets it inside its own `namespace kt {`, after _common.cuh, whose row_load / row_store
// layout it extends). A kernel is compiled for one path P per launch (KT_DISPATCH_ROW):
//   0 scalar: element (i * VEC + j) * NT + tid, coalesced scalar accesses, any length, any alignment;
//   1 vector: element (i * NT + tid) * VEC + j, 16-byte accesses; n a multiple of VEC, every pointer aligned;
//   2 peeled: the vector layout shifted by lead = the row's offset mod VEC, so element e sits at
//     (i * NT + tid) * VEC + j - lead: every pointer aligned, n any. The vectors holding the row's first or last
//     element are read and written an element at a time, every other one 16 bytes at a time, so rows of 4097 or
//     5003 elements no longer take the scalar path. Capacity NT * VEC * ITEMS >= n + lead.
// Weights indexed by column (not shifted with the row) are read with rows_weight_item: an element at a time on
// the peeled path (from L1/L2: one weight row serves every row).

template <int P, int VEC>
__device__ __forceinline__ int rows_lead(long long off) { return P == 2 ? (int)(off % VEC) : 0; }

template <int THREADS, int VEC, int ITEMS, int P>
__device__ __forceinline__ int rows_elem(int i, int j, int lead) {
  const int nt = row_threads<THREADS>();
  return P != 0 ? (i * nt + (int)threadIdx.x) * VEC + j - lead : (i * VEC + j) * nt + (int)threadIdx.x;
}

// Element e is one of the row's n (false for the padding of the last items and, peeled, before the row's start).
__device__ __forceinline__ bool rows_in(int e, int n) { return (unsigned)e < (unsigned)n; }

template <int THREADS, int VEC, int ITEMS, int P, typename T>
__device__ __forceinline__ void rows_load_item(const T* __restrict__ r, int n, int i, float (&v)[VEC], int lead) {
  if constexpr (P == 0) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int e = rows_elem<THREADS, VEC, ITEMS, 0>(i, j, 0);
      v[j] = e < n ? to_f(r[e]) : 0.f;
    }
  } else {
    const int e = rows_elem<THREADS, VEC, ITEMS, P>(i, 0, lead);
    if (P == 2 ? (e >= 0 && e + VEC <= n) : e < n) {
      load_vec<T, VEC>(r + e, v);
    } else if (P == 2) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = rows_in(e + j, n) ? to_f(r[e + j]) : 0.f;
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = 0.f;
    }
  }
}

template <int THREADS, int VEC, int ITEMS, int P, typename T>
__device__ __forceinline__ void rows_load(const T* __restrict__ r, int n, float (&v)[ITEMS][VEC], int lead) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) rows_load_item<THREADS, VEC, ITEMS, P>(r, n, i, v[i], lead);
}

// Item i of a vector indexed by column (a weight, or a mask row at an offset of its own) in the row's layout.
template <int THREADS, int VEC, int ITEMS, int P, typename T>
__device__ __forceinline__ void rows_weight_item(const T* __restrict__ w, int n, int i, float (&v)[VEC], int lead) {
  if constexpr (P == 2) {
    const int e = rows_elem<THREADS, VEC, ITEMS, 2>(i, 0, lead);
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = rows_in(e + j, n) ? to_f(w[e + j]) : 0.f;
  } else {
    rows_load_item<THREADS, VEC, ITEMS, P>(w, n, i, v, 0);
  }
}

template <int THREADS, int VEC, int ITEMS, int P, typename T>
__device__ __forceinline__ void rows_store(T* __restrict__ r, int n, const float (&v)[ITEMS][VEC], int lead) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if constexpr (P == 0) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int e = rows_elem<THREADS, VEC, ITEMS, 0>(i, j, 0);
        if (e < n) r[e] = from_f<T>(v[i][j]);
      }
    } else {
      const int e = rows_elem<THREADS, VEC, ITEMS, P>(i, 0, lead);
      if (P == 2 ? (e >= 0 && e + VEC <= n) : e < n) {
        store_vec<T, VEC>(r + e, v[i]);
      } else if (P == 2) {
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          if (rows_in(e + j, n)) r[e + j] = from_f<T>(v[i][j]);
      }
    }
  }
}

// Call CALL with `constexpr int P`, the row path, and `constexpr int IT` (KT_DISPATCH_ITEMS): 1 where VEC_OK (n a
// multiple of VEC and every pointer aligned), else 2 where BASE_OK (every pointer aligned) and the row's threads
// hold n + VEC - 1 elements, else 0. One launch takes one path (the block's reductions need every thread on it).
#define KT_DISPATCH_ROW(THR, n, VEC_OK, BASE_OK, CALL)                                             \
  do {                                                                                             \
    if (VEC_OK) {                                                                                  \
      constexpr int P = 1;                                                                         \
      KT_DISPATCH_ITEMS(THR, n, CALL);                                                             \
    } else if ((BASE_OK) && (long long)(THR) * KT_VEC * KT_ITEMS >= (long long)(n) + KT_VEC - 1) { \
      constexpr int P = 2;                                                                         \
      KT_DISPATCH_ITEMS(THR, (n) + KT_VEC - 1, CALL);                                              \
    } else {                                                                                       \
      constexpr int P = 0;                                                                         \
      KT_DISPATCH_ITEMS(THR, n, CALL);                                                             \
    }                                                                                              \
  } while (0)
