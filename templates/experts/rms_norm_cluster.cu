/* kerntune-expert:
name = "rms_norm_cluster"
family = "rms_norm"
description = "RMSNorm for few rows (decode): each row split over the CLUSTER blocks of a thread-block cluster (Hopper), so a row keeps CLUSTER SMs busy instead of one. Each block holds its slice of the row and of the weight in registers; the sum of squares is reduced over the block (warp shuffles) and then over the cluster (distributed shared memory). out = (T)(x * rsqrt(mean(x^2) + eps)) * w, like rms_norm."
function = "kt::rms_norm_cluster"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "w: in W[hidden]", "eps: f32", "rows: i32", "hidden: i32"]
constraints = ["VEC * ESIZE <= 16", "THREADS * VEC * ITEMS >= round_up(cdiv(hidden, CLUSTER), VEC)"]
serves = "rows <= 256"
helpers = ["_cluster.cuh"]

[params.CLUSTER]
values = [2, 4, 8]
default = 4
kind = "cluster_size"
why = "blocks of a thread-block cluster that share one row (each loads 1/CLUSTER of it); the row's reductions go over the cluster's distributed shared memory. 8 is the most a cluster may portably have"

[params.THREADS]
values = [32, 64, 128, 256, 512, 1024]
default = 256
kind = "block_size"
why = "most threads per block: the launch gives each block min(THREADS, ceil(slice / (VEC * ITEMS)) rounded up to a warp), the slice being ceil(hidden / CLUSTER) rounded up to a vector"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load/store: 16 bytes at most; a block falls back to scalar accesses when its slice or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4]
default = 2
kind = "items_per_thread"
why = "vectors each thread keeps in registers (THREADS * VEC * ITEMS must cover the slice); a slice that needs fewer uses the fewest that cover it"

[launch]
grid = ["rows * CLUSTER"]
block = ["min(THREADS, round_up(cdiv(round_up(cdiv(hidden, CLUSTER), VEC), VEC * ITEMS), 32))"]
bounds = "THREADS"
cluster = "CLUSTER"
smem = "0"
*/
// kt:bind KT_EXPERT_EPS_INSIDE = 1  (1: rsqrt(mean(x^2) + eps), 0: 1 / (sqrt(mean(x^2)) + eps))
// kt:bind KT_EXPERT_ROUND_BEFORE_WEIGHT = 1  (1: the normalized value rounded to T, then times the weight; 0: times the weight in fp32, rounded once)
// kt:bind KT_EXPERT_WEIGHT_OFFSET = 0  (0: the weight as stored; 1: the weight plus the last argument w_offset, in fp32 (Gemma's 1 + w, FlashInfer's weight_bias + w))
#ifndef KT_CLUSTER
#define KT_CLUSTER 4
#endif
#ifndef KT_THREADS
#define KT_THREADS 256
#endif
#ifndef KT_VEC
#define KT_VEC 8
#endif
#ifndef KT_ITEMS
#define KT_ITEMS 2
#endif
#include <cooperative_groups.h>

namespace kt {

template <int IT, typename T, typename W>
__device__ __forceinline__ void rms_norm_cluster_impl(T* __restrict__ out, const T* __restrict__ x,
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                                                      const W* __restrict__ w, float eps, int rows, int hidden,
                                                      float w_offset) {
#else  // kt:bind
                                                      const W* __restrict__ w, float eps, int rows, int hidden) {
#endif  // kt:bind
  if ((int)(blockIdx.x / KT_CLUSTER) >= rows) return;  // the cluster's blocks share the row: all return together
  const long long row = blockIdx.x / KT_CLUSTER;
  int begin, len;
  cluster_chunk<KT_CLUSTER, KT_VEC>(hidden, begin, len);
  const long long off = row * hidden + begin;
  const bool vec = vec_ok<T, KT_VEC>(len, x + off, out + off) && vec_ok<W, KT_VEC>(len, w + begin);
  float v[IT][KT_VEC];
  row_load<0, KT_VEC, IT>(x + off, len, vec, v);
  const SliceWeights<IT, KT_VEC, W> ws(w + begin, len, vec);
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) ss += v[i][j] * v[i][j];
  ss = cluster_reduce<KT_CLUSTER, 0>(row_reduce<0, 1, 0>(ss, Sum(), 0.f), Sum());
#if KT_EXPERT_EPS_INSIDE == 0  // kt:bind
  const float inv = 1.f / (sqrtf(ss / (float)hidden) + eps);
#else  // kt:bind
  const float inv = rsqrtf(ss / (float)hidden + eps);
#endif  // kt:bind
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    float wv[KT_VEC];
    ws.item(i, wv);
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) wv[j] += w_offset;
#endif  // kt:bind
#pragma unroll
#if KT_EXPERT_ROUND_BEFORE_WEIGHT == 0  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] * inv * wv[j];
#else  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = round_t<T>(v[i][j] * inv) * wv[j];
#endif  // kt:bind
  }
  row_store<0, KT_VEC, IT>(out + off, len, vec, v);
}

template <typename T, typename W>
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
__device__ __forceinline__ void rms_norm_cluster(T* out, const T* x, const W* w, float eps, int rows, int hidden,
                                                 float w_offset) {
#else  // kt:bind
__device__ __forceinline__ void rms_norm_cluster(T* out, const T* x, const W* w, float eps, int rows, int hidden) {
#endif  // kt:bind
  KT_DISPATCH_ITEMS((int)blockDim.x, (cluster_slice<KT_CLUSTER, KT_VEC>(hidden)),
#if KT_EXPERT_WEIGHT_OFFSET == 1  // kt:bind
                    (rms_norm_cluster_impl<IT, T, W>(out, x, w, eps, rows, hidden, w_offset)));
#else  // kt:bind
                    (rms_norm_cluster_impl<IT, T, W>(out, x, w, eps, rows, hidden)));
#endif  // kt:bind
}

}  // namespace kt
