/* kerntune-expert:
name = "rms_norm"
family = "rms_norm"
description = "RMSNorm over rows: out = (T)(x * rsqrt(mean(x^2) + eps)) * w. One pass over memory (the row stays in registers), 16-byte loads, warp-shuffle + one-warp block reduction, several rows per block for short rows."
function = "kt::rms_norm"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "w: in W[hidden]", "eps: f32", "rows: i32", "hidden: i32"]
helpers = ["_rows.cuh"]
constraints = ["VEC * ESIZE <= 16", "THREADS * VEC * ITEMS >= hidden", "THREADS * ROWS <= 1024", "THREADS * ROWS >= 32"]

[params.THREADS]
values = [32, 64, 128, 256, 512, 1024]
default = 256
kind = "block_size"
why = "most threads per row: the launch gives each row min(THREADS, ceil(hidden / (VEC * ITEMS)) rounded up to a warp) threads, so one configuration fits short and long rows; the row is reduced over them (warp shuffles, then the warps' partials through shared memory)"

[params.ROWS]
values = [1, 2, 4, 8]
default = 1
kind = "rows_per_block"
why = "rows per block (blockDim.y): more work per block for short rows"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load/store: 16 bytes at most; the kernel falls back to scalar accesses when the row or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4, 8, 16]
default = 8
kind = "items_per_thread"
why = "vectors each thread keeps in registers (the row is spread over just enough threads to give each this many; THREADS * VEC * ITEMS must cover the row); a row that needs fewer uses the fewest that cover it"

[launch]
grid = ["cdiv(rows, ROWS)"]
block = ["min(THREADS, round_up(cdiv(hidden, VEC * ITEMS), 32))", "ROWS"]
bounds = "THREADS * ROWS"
smem = "0"
*/
// kt:bind KT_EXPERT_EPS_INSIDE = 1  (1: rsqrt(mean(x^2) + eps), 0: 1 / (sqrt(mean(x^2)) + eps))
// kt:bind KT_EXPERT_WEIGHT = 1  (1: times a weight of hidden elements; 0: no weight (w is not read))
// kt:bind KT_EXPERT_ROUND_BEFORE_WEIGHT = 1  (1: the normalized value rounded to T, then times the weight; 0: times the weight in fp32, rounded once)
// kt:bind KT_EXPERT_X_STRIDE = 0  (0: the input rows hidden elements apart; 1: x_stride elements apart (the last argument; no weight offset): a row of a wider buffer, as vLLM's rms_norm takes a non-contiguous input; the output rows stay contiguous)
// kt:bind KT_EXPERT_WEIGHT_OFFSET = 0  (0: the weight as stored; 1: the weight plus the last argument w_offset, in fp32 (Gemma's 1 + w, FlashInfer's weight_bias + w))
#ifndef KT_THREADS
#define KT_THREADS 256
#endif
#ifndef KT_ROWS
#define KT_ROWS 1
#endif
#ifndef KT_VEC
#define KT_VEC 8
#endif
#ifndef KT_ITEMS
#define KT_ITEMS 8
#endif

namespace kt {

// P: the row path (scalar, vector, peeled: _rows.cuh), each compiled apart.
template <int IT, int P, typename T, typename W>
__device__ __forceinline__ void rms_norm_impl(T* __restrict__ out, const T* __restrict__ x, const W* __restrict__ w,
#if KT_EXPERT_X_STRIDE  // kt:bind
                                         long long x_stride,
#endif  // kt:bind
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                                         float eps, int rows, int hidden, float w_offset) {
#else  // kt:bind
                                         float eps, int rows, int hidden) {
#endif  // kt:bind
  const int row = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = row < rows;  // no early return: the block reduction needs every thread
  const long long off = (long long)(active ? row : 0) * hidden;
  const int lead = rows_lead<P, KT_VEC>(off);
  float v[IT][KT_VEC];
#if KT_EXPERT_X_STRIDE  // kt:bind
  // the input row at its own stride: the dispatch gives the peeled path only where it keeps the output's lead
  rows_load<0, KT_VEC, IT, P>(x + (long long)(active ? row : 0) * x_stride, hidden, v, lead);
#else  // kt:bind
  rows_load<0, KT_VEC, IT, P>(x + off, hidden, v, lead);
#endif  // kt:bind
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) ss += v[i][j] * v[i][j];
  ss = row_reduce<0, KT_ROWS, 0>(ss, Sum(), 0.f);
#if KT_EXPERT_EPS_INSIDE == 0  // kt:bind
  const float inv = 1.f / (sqrtf(ss / (float)hidden) + eps);
#else  // kt:bind
  const float inv = rsqrtf(ss / (float)hidden + eps);
#endif  // kt:bind
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    float wv[KT_VEC];
#if KT_EXPERT_WEIGHT == 0  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) wv[j] = 1.f;
#else  // kt:bind
    rows_weight_item<0, KT_VEC, IT, P>(w, hidden, i, wv, lead);
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) wv[j] += w_offset;
#endif  // kt:bind
#endif  // kt:bind
#pragma unroll
#if KT_EXPERT_ROUND_BEFORE_WEIGHT == 0  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] * inv * wv[j];
#else  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = round_t<T>(v[i][j] * inv) * wv[j];
#endif  // kt:bind
  }
  if (active) rows_store<0, KT_VEC, IT, P>(out + off, hidden, v, lead);
}

template <typename T, typename W>
#if KT_EXPERT_X_STRIDE  // kt:bind
__device__ __forceinline__ void rms_norm(T* out, const T* x, const W* w, float eps, int rows, int hidden,
                                         long long x_stride) {
  // vector rows need the stride a multiple of the vector; the peeled rows the same lead as the output's
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x, out) && x_stride % KT_VEC == 0 && vec_ok<W, KT_VEC>(hidden, w)),
                  (vec_ok<T, KT_VEC>(0, x, out) && (x_stride - hidden) % KT_VEC == 0),
                  (rms_norm_impl<IT, P, T, W>(out, x, w, x_stride, eps, rows, hidden)));
}
#elif KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
__device__ __forceinline__ void rms_norm(T* out, const T* x, const W* w, float eps, int rows, int hidden,
                                         float w_offset) {
#else  // kt:bind
__device__ __forceinline__ void rms_norm(T* out, const T* x, const W* w, float eps, int rows, int hidden) {
#endif  // kt:bind
#if KT_EXPERT_X_STRIDE == 0  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x, out) && vec_ok<W, KT_VEC>(hidden, w)),
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                  (vec_ok<T, KT_VEC>(0, x, out)),
                  (rms_norm_impl<IT, P, T, W>(out, x, w, eps, rows, hidden, w_offset)));
#else  // kt:bind
                  (vec_ok<T, KT_VEC>(0, x, out)), (rms_norm_impl<IT, P, T, W>(out, x, w, eps, rows, hidden)));
#endif  // kt:bind
}
#endif  // kt:bind

}  // namespace kt
