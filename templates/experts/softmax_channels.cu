/* kerntune-expert:
name = "softmax_channels"
family = "softmax"
description = "Softmax over a strided dimension: x [outer, C, inner], softmax over C for every (outer, inner) column (NCHW's channels, dim=1 of a contiguous tensor). A block of TX x CY threads: threadIdx.x over VEC consecutive columns (coalesced, VEC-wide loads where inner and the pointers allow), threadIdx.y over the channels; each thread keeps an online max and sum over its channels, merged across y through shared memory, then every element is written exp(x - max) / sum (two reads, one write)."
function = "kt::softmax_channels"
roles = ["out: out O[outer * channels * inner]", "x: in T[outer * channels * inner]", "outer: i32", "channels: i32", "inner: i32"]
constraints = ["VEC * ESIZE <= 16", "TX * CY <= 1024", "TX * CY >= 32", "TX * CY * VEC <= 4096"]

[params.TX]
values = [32, 64, 128, 256]
default = 64
kind = "block_size"
why = "threads along the columns (blockDim.x), each VEC consecutive columns: coalesced reads of one channel"

[params.CY]
values = [1, 2, 4, 8, 16]
default = 4
kind = "rows_per_block"
why = "threads along the channels (blockDim.y): each walks every CY-th channel; their maxima and sums merged in shared memory"

[params.VEC]
values = [1, 2, 4, 8]
default = 4
kind = "vector_width"
why = "consecutive columns a thread holds (one VEC-wide load a channel where inner and the pointers allow, else scalar)"

[launch]
grid = ["outer * cdiv(inner, TX * VEC)"]
block = ["TX", "CY"]
smem = "0"
*/
// kt:bind KT_EXPERT_FAST_EXP = 0  (0: expf; 1: __expf, for a kernel that uses it)
#ifndef KT_TX
#define KT_TX 64
#endif
#ifndef KT_CY
#define KT_CY 4
#endif
#ifndef KT_VEC
#define KT_VEC 4
#endif

namespace kt {

__device__ __forceinline__ float channel_exp(float v) {
#if KT_EXPERT_FAST_EXP  // kt:bind
  return __expf(v);
#else  // kt:bind
  return expf(v);
#endif  // kt:bind
}

// VEC columns of channel c from p (the column block's first): one vector load where `wide`, else each column
// inside the row (`n` of them) read alone, the rest -inf.
template <int VEC, typename T>
__device__ __forceinline__ void load_columns(const T* p, bool wide, int n, float (&v)[VEC]) {
  if (wide) {
    load_vec<T, VEC>(p, v);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = j < n ? to_f(p[j]) : -INFINITY;
  }
}

template <typename T, typename O>
__device__ __forceinline__ void softmax_channels(O* __restrict__ out, const T* __restrict__ x, int outer, int channels,
                                                 int inner) {
  constexpr int VEC = KT_VEC, TX = KT_TX, CY = KT_CY, COLS = TX * VEC;
  __shared__ float s_max[CY][COLS];
  __shared__ float s_sum[CY][COLS];
  const int tiles = (inner + COLS - 1) / COLS;
  const long long o = blockIdx.x / tiles;
  const int col0 = (int)(blockIdx.x - o * tiles) * COLS + threadIdx.x * VEC;
  const int n = min(VEC, inner - col0);  // this thread's columns inside the row (<= 0: none)
  const long long base = o * channels * (long long)inner + col0;
  const bool wide = n == VEC && VEC > 1 && inner % VEC == 0 && vec_ok<T, VEC>(0, x) && vec_ok<O, VEC>(0, out);
  float m[VEC], l[VEC], v[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) { m[j] = -INFINITY; l[j] = 0.f; }
  if (n > 0) {
    for (int c = threadIdx.y; c < channels; c += CY) {
      load_columns<VEC>(x + base + (long long)c * inner, wide, n, v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {  // online: the sum rescaled where the max grows
        const float mn = fmaxf(m[j], v[j]);
        l[j] = (mn == -INFINITY ? 0.f : l[j] * channel_exp(m[j] - mn)) + (mn == -INFINITY ? 0.f : channel_exp(v[j] - mn));
        m[j] = mn;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    s_max[threadIdx.y][threadIdx.x * VEC + j] = m[j];
    s_sum[threadIdx.y][threadIdx.x * VEC + j] = l[j];
  }
  __syncthreads();
  if (n <= 0) return;
  float M[VEC], inv[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    float mm = -INFINITY, ll = 0.f;
#pragma unroll
    for (int y = 0; y < CY; ++y) {
      const float my = s_max[y][threadIdx.x * VEC + j], ly = s_sum[y][threadIdx.x * VEC + j];
      const float mn = fmaxf(mm, my);
      if (mn != -INFINITY) ll = ll * channel_exp(mm - mn) + ly * channel_exp(my - mn);
      mm = mn;
    }
    M[j] = mm;
    inv[j] = 1.f / ll;
  }
  for (int c = threadIdx.y; c < channels; c += CY) {
    const long long at = base + (long long)c * inner;
    load_columns<VEC>(x + at, wide, n, v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = channel_exp(v[j] - M[j]) * inv[j];
    if (wide) {
      store_vec<O, VEC>(out + at, v);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (j < n) out[at + j] = from_f<O>(v[j]);
    }
  }
}

}  // namespace kt
