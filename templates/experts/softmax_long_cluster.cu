/* kerntune-expert:
name = "softmax_long_cluster"
family = "softmax"
description = "Row softmax over a vocabulary in one read (Hopper): each row split over the CLUSTER blocks of a thread-block cluster, each block holding its slice in registers (up to 32 values a thread), the max and then the sum of exp(x - max) reduced over the block and then over the cluster (distributed shared memory). The cluster twin of softmax_long: where softmax_long reads the row twice, this reads it once, at any row count (not a regime of few rows: the planner tries it right after softmax_long). Plain and scaled/divided conventions as softmax_long; expf kept."
function = "kt::softmax_long_cluster"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "rows: i32", "hidden: i32"]
constraints = ["VEC * ESIZE <= 16", "THREADS * VEC * ITEMS >= round_up(cdiv(hidden, CLUSTER), VEC)"]
helpers = ["_cluster.cuh", "_logits.cuh"]

[params.CLUSTER]
values = [2, 4, 8]
default = 8
kind = "cluster_size"
closed = true
why = "blocks of a thread-block cluster that share one row (each loads 1/CLUSTER of it); 8 is the most a cluster may portably have"

[params.THREADS]
values = [256, 512, 1024]
default = 1024
kind = "block_size"
why = "most threads per block: the launch gives each block min(THREADS, ceil(slice / (VEC * ITEMS)) rounded up to a warp), the slice being ceil(hidden / CLUSTER) rounded up to a vector"

[params.VEC]
values = [1, 2, 4, 8]
default = 4
kind = "vector_width"
why = "elements per load/store: 16 bytes at most; a block falls back to scalar accesses when its slice or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4, 8]
default = 8
kind = "items_per_thread"
why = "vectors each thread keeps in registers (THREADS * VEC * ITEMS must cover the slice); a slice that needs fewer uses the fewest that cover it"

[launch]
grid = ["rows * CLUSTER"]
block = ["min(THREADS, round_up(cdiv(round_up(cdiv(hidden, CLUSTER), VEC), VEC * ITEMS), 32))"]
bounds = "THREADS"
cluster = "CLUSTER"
smem = "0"
*/
// kt:bind KT_EXPERT_GENERAL = 0  (0: softmax(x) stored as the input's type; 1: softmax(x * scale / row_div[row]) stored as a type of its own)
#ifndef KT_CLUSTER
#define KT_CLUSTER 8
#endif
#ifndef KT_THREADS
#define KT_THREADS 1024
#endif
#ifndef KT_VEC
#define KT_VEC 4
#endif
#ifndef KT_ITEMS
#define KT_ITEMS 8
#endif
#include <cooperative_groups.h>

namespace kt {

// The block's slice of one row, in registers: softmax over the whole row (the cluster's), FN the logit of a value.
// VP: the vector path (the whole row a multiple of VEC, pointers aligned: every block's slice is), compiled apart
// from the scalar one; the choice is the same for every block of the cluster.
template <int IT, bool VP, typename T, typename O, typename FN>
__device__ __forceinline__ void softmax_slice(O* __restrict__ out, const T* __restrict__ x, long long row,
                                              int hidden, FN fn) {
  int begin, len;
  cluster_chunk<KT_CLUSTER, KT_VEC>(hidden, begin, len);
  const long long off = row * hidden + begin;
  constexpr bool vec = VP;
  float v[IT][KT_VEC];
  row_load<0, KT_VEC, IT>(x + off, len, vec, v);
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
      v[i][j] = fn(v[i][j]);
      if (row_elem<0, KT_VEC, IT>(vec, i, j) < len) m = fmaxf(m, v[i][j]);
    }
  m = cluster_reduce<KT_CLUSTER, 0>(row_reduce<0, 1, 0>(m, Max(), -INFINITY), Max());
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
      const float e = row_elem<0, KT_VEC, IT>(vec, i, j) < len ? expf(v[i][j] - m) : 0.f;
      v[i][j] = e;
      s += e;
    }
  const float inv = 1.f / cluster_reduce<KT_CLUSTER, 1>(row_reduce<0, 1, 1>(s, Sum(), 0.f), Sum());  // one division per row
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] * inv;
  row_store<0, KT_VEC, IT>(out + off, len, vec, v);
}

// This block's slice of the row on the path the whole row allows (the same for every block of the cluster).
template <typename T, typename O, typename FN>
__device__ __forceinline__ void softmax_row_slices(O* out, const T* x, long long row, int hidden, FN fn) {
  if (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out))
    KT_DISPATCH_ITEMS((int)blockDim.x, (cluster_slice<KT_CLUSTER, KT_VEC>(hidden)),
                      (softmax_slice<IT, true, T, O>(out, x, row, hidden, fn)));
  else
    KT_DISPATCH_ITEMS((int)blockDim.x, (cluster_slice<KT_CLUSTER, KT_VEC>(hidden)),
                      (softmax_slice<IT, false, T, O>(out, x, row, hidden, fn)));
}

#if KT_EXPERT_GENERAL == 0  // kt:bind
template <typename T>
__device__ __forceinline__ void softmax_long_cluster(T* out, const T* x, int rows, int hidden) {
  if ((int)(blockIdx.x / KT_CLUSTER) >= rows) return;  // the cluster's blocks share the row: all return together
  softmax_row_slices<T, T>(out, x, blockIdx.x / KT_CLUSTER, hidden, LogitIdentity());
}
#else  // kt:bind
template <typename T, typename O>
__device__ __forceinline__ void softmax_long_cluster(O* out, const T* x, int rows, int hidden, float scale,
                                                     const float* row_div) {
  if ((int)(blockIdx.x / KT_CLUSTER) >= rows) return;  // the cluster's blocks share the row: all return together
  const long long row = blockIdx.x / KT_CLUSTER;
  if (row_div != nullptr)
    softmax_row_slices<T, O>(out, x, row, hidden, LogitScaleDiv{scale, row_div[row]});
  else
    softmax_row_slices<T, O>(out, x, row, hidden, LogitScale{scale});
}
#endif  // kt:bind

}  // namespace kt
