// kerntune expert templates: shared helpers (prepended to every bound expert by agent_core.experts.bind).
// Conversions to/from float for float/half/bf16, 16-byte vector loads and stores, warp and block reductions.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

namespace kt {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// VEC elements of T moved as one aligned access (VEC * sizeof(T) <= 16).
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) Vec { T v[VEC]; };

template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[VEC]) {
  Vec<T, VEC> t = *reinterpret_cast<const Vec<T, VEC>*>(p);
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = to_f(t.v[j]);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[VEC]) {
  Vec<T, VEC> t;
#pragma unroll
  for (int j = 0; j < VEC; ++j) t.v[j] = from_f<T>(in[j]);
  *reinterpret_cast<Vec<T, VEC>*>(p) = t;
}

// True when every pointer is aligned to VEC elements of T and n is a multiple of VEC: the vector path is valid.
template <typename T, int VEC>
__device__ __forceinline__ bool vec_ok(long long n, const void* a, const void* b = nullptr,
                                       const void* c = nullptr, const void* d = nullptr) {
  const uintptr_t m = sizeof(T) * VEC - 1;
  return (n % VEC) == 0 && ((uintptr_t)a & m) == 0 && ((uintptr_t)b & m) == 0 && ((uintptr_t)c & m) == 0 &&
         ((uintptr_t)d & m) == 0;
}

struct Sum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
struct Max { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };

// Reduce over the WIDTH lanes of a warp segment (WIDTH a power of two <= 32).
template <int WIDTH, typename Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o, WIDTH));
  return v;
}

// Threads per row: THREADS where it is fixed at compile time, else (THREADS == 0) blockDim.x, which the launch
// sizes to the row (a multiple of 32).
template <int THREADS>
__device__ __forceinline__ int row_threads() { return THREADS > 0 ? THREADS : (int)blockDim.x; }

// Reduce over the threads of one row (threadIdx.x of one threadIdx.y); every thread gets the result.
// One warp per row: warp shuffles only. Otherwise warp shuffles, one __syncthreads, then every warp reduces the
// per-warp partials itself. SLOT names the shared buffer: consecutive reductions of one kernel use different
// slots, so no barrier is needed between them.
template <int THREADS, int ROWS, int SLOT = 0, typename Op>
__device__ __forceinline__ float row_reduce(float v, Op op, float identity) {
  if constexpr (THREADS > 0 && THREADS <= 32) {
    return warp_reduce<THREADS>(v, op);
  } else {
    const int nthr = row_threads<THREADS>();
    v = warp_reduce<32>(v, op);
    if (THREADS == 0 && nthr <= 32) return v;  // one warp per row (uniform over the block)
    constexpr int MAXW = THREADS > 0 ? THREADS / 32 : 32;
    __shared__ float part[ROWS][MAXW];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) part[threadIdx.y][warp] = v;
    __syncthreads();
    float w = lane < (nthr >> 5) ? part[threadIdx.y][lane] : identity;
    return warp_reduce<32>(w, op);
  }
}

// One row held in registers: element e(i, j) of the row is, on the vector path, (i * NT + tid) * VEC + j
// (16-byte accesses, coalesced), on the scalar path (any size, any alignment), (i * VEC + j) * NT + tid, with NT
// the threads of the row (row_threads). Elements past n read as 0 and are not stored. Capacity: NT * VEC * ITEMS >= n.
template <int THREADS, int VEC, int ITEMS>
__device__ __forceinline__ int row_elem(bool vec, int i, int j) {
  const int nt = row_threads<THREADS>();
  return vec ? (i * nt + (int)threadIdx.x) * VEC + j : (i * VEC + j) * nt + (int)threadIdx.x;
}

template <int THREADS, int VEC, int ITEMS, typename T>
__device__ __forceinline__ void row_load(const T* __restrict__ r, int n, bool vec, float (&v)[ITEMS][VEC]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if (vec) {
      const int e = row_elem<THREADS, VEC, ITEMS>(true, i, 0);
      if (e < n) {
        load_vec<T, VEC>(r + e, v[i]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[i][j] = 0.f;
      }
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int e = row_elem<THREADS, VEC, ITEMS>(false, i, j);
        v[i][j] = e < n ? to_f(r[e]) : 0.f;
      }
    }
  }
}

// Item i of the row only (weights read where they are used, so they need no registers of their own).
template <int THREADS, int VEC, int ITEMS, typename T>
__device__ __forceinline__ void row_load_item(const T* __restrict__ r, int n, bool vec, int i, float (&v)[VEC]) {
  if (vec) {
    const int e = row_elem<THREADS, VEC, ITEMS>(true, i, 0);
    if (e < n) {
      load_vec<T, VEC>(r + e, v);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = 0.f;
    }
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int e = row_elem<THREADS, VEC, ITEMS>(false, i, j);
      v[j] = e < n ? to_f(r[e]) : 0.f;
    }
  }
}

template <int THREADS, int VEC, int ITEMS, typename T>
__device__ __forceinline__ void row_store(T* __restrict__ r, int n, bool vec, const float (&v)[ITEMS][VEC]) {
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    if (vec) {
      const int e = row_elem<THREADS, VEC, ITEMS>(true, i, 0);
      if (e < n) store_vec<T, VEC>(r + e, v[i]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int e = row_elem<THREADS, VEC, ITEMS>(false, i, j);
        if (e < n) r[e] = from_f<T>(v[i][j]);
      }
    }
  }
}

// Round through T and back (what storing to T and reading it again gives).
template <typename T> __device__ __forceinline__ float round_t(float v) { return to_f(from_f<T>(v)); }

// Call CALL with `constexpr int IT` = the fewest items per thread (a power of two <= KT_ITEMS) whose capacity
// THR * KT_VEC * IT covers n (THR: the row's threads, a constant or blockDim.x): one compiled configuration
// serves short and long rows.
#define KT_DISPATCH_ITEMS(THR, n, CALL)                                                          \
  do {                                                                                           \
    const int kt_n_ = (n);                                                                       \
    if (KT_ITEMS <= 1 || kt_n_ <= (THR) * KT_VEC * 1) { constexpr int IT = 1; CALL; }            \
    else if (KT_ITEMS <= 2 || kt_n_ <= (THR) * KT_VEC * 2) { constexpr int IT = KT_ITEMS < 2 ? KT_ITEMS : 2; CALL; } \
    else if (KT_ITEMS <= 4 || kt_n_ <= (THR) * KT_VEC * 4) { constexpr int IT = KT_ITEMS < 4 ? KT_ITEMS : 4; CALL; } \
    else if (KT_ITEMS <= 8 || kt_n_ <= (THR) * KT_VEC * 8) { constexpr int IT = KT_ITEMS < 8 ? KT_ITEMS : 8; CALL; } \
    else { constexpr int IT = KT_ITEMS < 16 ? KT_ITEMS : 16; CALL; }                             \
  } while (0)

}  // namespace kt
