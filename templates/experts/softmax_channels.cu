/* kerntune-expert:
name = "softmax_channels"
family = "softmax"
description = "Softmax over a strided dimension: x [outer, C, inner], softmax over C for every (outer, inner) column (NCHW's channels, dim=1 of a contiguous tensor). A block of TX x CY threads: threadIdx.x over VEC consecutive columns (coalesced, VEC-wide loads where inner and the pointers allow), threadIdx.y over the channels; each thread keeps an online max and sum over its channels, merged across y through shared memory, then every element is written exp(x - max) / sum (two reads, one write). A row narrower than TX * VEC columns folds the block's threads onto the channels (a power of two along the columns, the rest along the channels, merged by warp shuffles); inner = 1 walks the contiguous channels as rows, RB rows a block (cdiv(outer, RB) blocks there), VEC channels a thread, its first two chunks kept in registers for the second pass."
function = "kt::softmax_channels"
roles = ["out: out O[outer * channels * inner]", "x: in T[outer * channels * inner]", "outer: i32", "channels: i32", "inner: i32"]
constraints = ["VEC * ESIZE <= 16", "TX * CY <= 1024", "TX * CY >= 32", "TX * CY * VEC <= 4096", "TX * CY >= 4 * RB"]

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

[params.RB]
values = [1, 2, 4, 8, 16, 32]
default = 1
kind = "rows_per_block"
why = "rows a block where inner = 1 (a [rows, classes] softmax: the channels contiguous): the block's TX * CY threads split into RB rows of TX * CY / RB threads each; 1 where no size set has inner = 1"

[launch]
grid = ["cdiv(outer, RB if inner == 1 else 1) * cdiv(inner, TX * VEC)"]
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
#ifndef KT_RB
#define KT_RB 1
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

// The running (max, sum) pair (m, l) merged with another: the sum rescaled to the larger max (-inf: nothing yet).
__device__ __forceinline__ void merge_max_sum(float& m, float& l, float m2, float l2) {
  const float mn = fmaxf(m, m2);
  if (mn != -INFINITY) l = l * channel_exp(m - mn) + l2 * channel_exp(m2 - mn);
  m = mn;
}

// inner == 1 (a classifier's or a router's [rows, classes]): the channels of a column are contiguous, so the whole
// block walks them as a row, VEC consecutive channels a thread (one vector load where the row and pointers allow),
// its maxima and sums merged by warp shuffles and then across the warps through shared memory. A thread's first two
// chunks stay in registers for the second pass (a row of up to 2 * NT * VEC channels is read once).
template <int VEC>
__device__ __forceinline__ void row_chunk_max_sum(const float (&v)[VEC], float& m, float& l) {
  float vm = v[0];
#pragma unroll
  for (int j = 1; j < VEC; ++j) vm = fmaxf(vm, v[j]);
  float vs = 0.f;
  if (vm != -INFINITY) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) vs += channel_exp(v[j] - vm);
  }
  merge_max_sum(m, l, vm, vs);
}

template <int VEC, typename O>
__device__ __forceinline__ void row_chunk_store(O* __restrict__ w, int c, int channels, bool wide, float (&v)[VEC],
                                                float m, float inv) {
#pragma unroll
  for (int j = 0; j < VEC; ++j) v[j] = channel_exp(v[j] - m) * inv;
  if (wide) {
    store_vec<O, VEC>(w + c, v);
  } else {
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      if (c + j < channels) w[c + j] = from_f<O>(v[j]);
  }
}

template <int VEC, int NT, int RB, typename T, typename O>
__device__ __forceinline__ void channels_as_row(O* __restrict__ out, const T* __restrict__ x, int outer, int channels,
                                                float* s_max, float* s_sum) {
  constexpr int G = NT / RB;  // threads a row: RB rows a block
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, lane = tid & 31, warp = tid >> 5, t = tid % G;
  const long long o = (long long)blockIdx.x * RB + tid / G;
  const int n = o < outer ? channels : 0;  // a row past the last: no loads, no stores (it still shuffles)
  const T* r = x + o * channels;
  O* w = out + o * channels;
  const bool wide = VEC > 1 && vec_ok<T, VEC>(channels, r) && vec_ok<O, VEC>(0, w);
  const int c0 = t * VEC, c1 = c0 + G * VEC;
  float m = -INFINITY, l = 0.f, k0[VEC], k1[VEC], v[VEC];
  if (c0 < n) { load_columns<VEC>(r + c0, wide, n - c0, k0); row_chunk_max_sum<VEC>(k0, m, l); }
  if (c1 < n) { load_columns<VEC>(r + c1, wide, n - c1, k1); row_chunk_max_sum<VEC>(k1, m, l); }
  for (int c = c1 + G * VEC; c < n; c += G * VEC) {
    load_columns<VEC>(r + c, wide, n - c, v);
    row_chunk_max_sum<VEC>(v, m, l);
  }
#pragma unroll
  for (int off = (G < 32 ? G : 32) / 2; off > 0; off >>= 1)
    merge_max_sum(m, l, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, l, off));
  if constexpr (G > 32) {  // a row over several warps: their pairs merged through shared memory
    if (lane == 0) { s_max[warp] = m; s_sum[warp] = l; }
    __syncthreads();
    m = -INFINITY;
    l = 0.f;
    const int first = (tid / G) * (G / 32);
#pragma unroll
    for (int k = 0; k < G / 32; ++k) merge_max_sum(m, l, s_max[first + k], s_sum[first + k]);
  }
  const float inv = 1.f / l;
  if (c0 < n) row_chunk_store<VEC>(w, c0, n, wide, k0, m, inv);
  if (c1 < n) row_chunk_store<VEC>(w, c1, n, wide, k1, m, inv);
  for (int c = c1 + G * VEC; c < n; c += G * VEC) {
    load_columns<VEC>(r + c, wide, n - c, v);
    row_chunk_store<VEC>(w, c, n, wide, v, m, inv);
  }
}

// Columns [outer, C, inner] in tiles of TX * VEC; FOLD (inner narrower than a tile, one tile a row): the block's
// threads refolded as EX along the columns (the power of two covering them) by NT / EX along the channels, the
// threads of one column merged by warp shuffles where EX < 32, then across warps through shared memory.
template <bool FOLD, int VEC, int TX, int CY, typename T, typename O>
__device__ __forceinline__ void channels_columns(O* __restrict__ out, const T* __restrict__ x, int channels, int inner,
                                                 float* s_max, float* s_sum) {
  constexpr int NT = TX * CY, COLS = TX * VEC;
  const int tiles = (inner + COLS - 1) / COLS;
  const long long o = blockIdx.x / tiles;
  const int tid = threadIdx.y * TX + threadIdx.x;
  int ex = TX, shift = 0;
  if (FOLD) {
    ex = 1;
    while (ex * VEC < inner) ex <<= 1;
    shift = __ffs(ex) - 1;
  }
  const int tx = FOLD ? (tid & (ex - 1)) : (int)threadIdx.x, ty = FOLD ? (tid >> shift) : (int)threadIdx.y;
  const int ey = FOLD ? NT >> shift : CY;
  const int col0 = (int)(blockIdx.x - o * tiles) * COLS + tx * VEC;
  const int n = min(VEC, inner - col0);  // this thread's columns inside the row (<= 0: none)
  const long long base = o * channels * (long long)inner + col0;
  const bool wide = n == VEC && VEC > 1 && inner % VEC == 0 && vec_ok<T, VEC>(0, x) && vec_ok<O, VEC>(0, out);
  float m[VEC], l[VEC], v[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) { m[j] = -INFINITY; l[j] = 0.f; }
  if (n > 0) {
    for (int c = ty; c < channels; c += ey) {
      load_columns<VEC>(x + base + (long long)c * inner, wide, n, v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) merge_max_sum(m[j], l[j], v[j], v[j] == -INFINITY ? 0.f : 1.f);
    }
  }
  // The partial pairs of one column: within a warp (lanes EX apart) by shuffles, then one row of shared memory a
  // warp (FOLD, EX < 32) or a thread row (EX >= 32), merged serially (at most 32 rows).
  const bool shuffled = FOLD && ex < 32;
  if (shuffled) {
    for (int off = 16; off >= ex; off >>= 1)
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        merge_max_sum(m[j], l[j], __shfl_xor_sync(0xffffffffu, m[j], off), __shfl_xor_sync(0xffffffffu, l[j], off));
  }
  const int rows = shuffled ? NT / 32 : ey, row = shuffled ? tid >> 5 : ty;
  if (!shuffled || (tid & 31) < ex) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      s_max[(row * ex + tx) * VEC + j] = m[j];
      s_sum[(row * ex + tx) * VEC + j] = l[j];
    }
  }
  __syncthreads();
  if (n <= 0) return;
  float M[VEC], inv[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    float mm = -INFINITY, ll = 0.f;
    for (int y = 0; y < rows; ++y) merge_max_sum(mm, ll, s_max[(y * ex + tx) * VEC + j], s_sum[(y * ex + tx) * VEC + j]);
    M[j] = mm;
    inv[j] = 1.f / ll;
  }
  for (int c = ty; c < channels; c += ey) {
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

template <typename T, typename O>
__device__ __forceinline__ void softmax_channels(O* __restrict__ out, const T* __restrict__ x, int outer, int channels,
                                                 int inner) {
  constexpr int VEC = KT_VEC, TX = KT_TX, CY = KT_CY;
  __shared__ float s_max[TX * CY * VEC];
  __shared__ float s_sum[TX * CY * VEC];
  if (inner == 1)
    channels_as_row<VEC, TX * CY, KT_RB>(out, x, outer, channels, s_max, s_sum);
  else if (inner < TX * VEC)
    channels_columns<true, VEC, TX, CY>(out, x, channels, inner, s_max, s_sum);
  else
    channels_columns<false, VEC, TX, CY>(out, x, channels, inner, s_max, s_sum);
}

}  // namespace kt
