/* kerntune-expert:
name = "softmax_cluster"
family = "softmax"
description = "Row softmax for few rows: each row split over the CLUSTER blocks of a thread-block cluster (Hopper). Each block holds its slice in registers; the max and then the sum of exp(x - max) are reduced over the block and then over the cluster (distributed shared memory). out = exp(x - max) / sum(exp(x - max)), expf kept like softmax."
function = "kt::softmax_cluster"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "rows: i32", "hidden: i32"]
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

// VP: the vector path (the whole row a multiple of VEC, pointers aligned: every block's slice is), compiled apart
// from the scalar one; the choice is the same for every block of the cluster.
template <int IT, bool VP, typename T>
__device__ __forceinline__ void softmax_cluster_impl(T* __restrict__ out, const T* __restrict__ x, int rows,
                                                     int hidden) {
  if ((int)(blockIdx.x / KT_CLUSTER) >= rows) return;  // the cluster's blocks share the row: all return together
  const long long row = blockIdx.x / KT_CLUSTER;
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
    for (int j = 0; j < KT_VEC; ++j)
      if (row_elem<0, KT_VEC, IT>(vec, i, j) < len) m = fmaxf(m, v[i][j]);
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

template <typename T>
__device__ __forceinline__ void softmax_cluster(T* out, const T* x, int rows, int hidden) {
  if (vec_ok<T, KT_VEC>(hidden, x, out))
    KT_DISPATCH_ITEMS((int)blockDim.x, (cluster_slice<KT_CLUSTER, KT_VEC>(hidden)),
                      (softmax_cluster_impl<IT, true, T>(out, x, rows, hidden)));
  else
    KT_DISPATCH_ITEMS((int)blockDim.x, (cluster_slice<KT_CLUSTER, KT_VEC>(hidden)),
                      (softmax_cluster_impl<IT, false, T>(out, x, rows, hidden)));
}

}  // namespace kt
