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

// Reduce over the THREADS threads of one row (threadIdx.x of one threadIdx.y); every thread gets the result.
// THREADS <= 32: warp shuffles only. Otherwise warp shuffles, then one warp over the per-warp partials.
template <int THREADS, int ROWS, typename Op>
__device__ __forceinline__ float row_reduce(float v, Op op, float identity) {
  if constexpr (THREADS <= 32) {
    return warp_reduce<THREADS>(v, op);
  } else {
    constexpr int WARPS = THREADS / 32;
    __shared__ float part[ROWS][WARPS];
    __shared__ float result[ROWS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_reduce<32>(v, op);
    if (lane == 0) part[threadIdx.y][warp] = v;
    __syncthreads();
    if (warp == 0) {
      float w = lane < WARPS ? part[threadIdx.y][lane] : identity;
      w = warp_reduce<32>(w, op);
      if (lane == 0) result[threadIdx.y] = w;
    }
    __syncthreads();
    float r = result[threadIdx.y];
    __syncthreads();  // the buffers may be reused by the next reduction
    return r;
  }
}

// One row held in registers: element e(i, j) of the row is, on the vector path, (i * THREADS + tid) * VEC + j
// (16-byte accesses, coalesced), on the scalar path (any size, any alignment), (i * VEC + j) * THREADS + tid.
// Elements past n read as 0 and are not stored. Capacity: THREADS * VEC * ITEMS >= n.
template <int THREADS, int VEC, int ITEMS>
__device__ __forceinline__ int row_elem(bool vec, int i, int j) {
  return vec ? (i * THREADS + (int)threadIdx.x) * VEC + j : (i * VEC + j) * THREADS + (int)threadIdx.x;
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
// KT_THREADS_ * KT_VEC * IT covers n: one compiled configuration serves short and long rows.
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
