/* kerntune-expert:
name = "layer_norm_cluster"
family = "layer_norm"
description = "LayerNorm for few rows (decode): each row split over the CLUSTER blocks of a thread-block cluster (Hopper). Each block holds its slice of the row, gamma and beta in registers; the mean and then the variance (exact two-step, like layer_norm) are reduced over the block and then over the cluster (distributed shared memory). out = (x - mean) * rsqrt(var + eps) * gamma + beta."
function = "kt::layer_norm_cluster"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "gamma: in W[hidden]", "beta: in W[hidden]", "eps: f32", "rows: i32", "hidden: i32"]
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

template <int IT, typename T, typename W>
__device__ __forceinline__ void layer_norm_cluster_impl(T* __restrict__ out, const T* __restrict__ x,
                                                        const W* __restrict__ gamma, const W* __restrict__ beta,
                                                        float eps, int rows, int hidden) {
  if ((int)(blockIdx.x / KT_CLUSTER) >= rows) return;  // the cluster's blocks share the row: all return together
  const long long row = blockIdx.x / KT_CLUSTER;
  int begin, len;
  cluster_chunk<KT_CLUSTER, KT_VEC>(hidden, begin, len);
  const long long off = row * hidden + begin;
  const bool vec = vec_ok<T, KT_VEC>(len, x + off, out + off) && vec_ok<W, KT_VEC>(len, gamma + begin, beta + begin);
  float v[IT][KT_VEC];
  row_load<0, KT_VEC, IT>(x + off, len, vec, v);
  const SliceWeights<IT, KT_VEC, W, 8> gs(gamma + begin, len, vec), bs(beta + begin, len, vec);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) s += v[i][j];
  const float mean = cluster_reduce<KT_CLUSTER, 0>(row_reduce<0, 1, 0>(s, Sum(), 0.f), Sum()) / (float)hidden;
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
      const float d = row_elem<0, KT_VEC, IT>(vec, i, j) < len ? v[i][j] - mean : 0.f;
      q += d * d;
    }
  const float var = cluster_reduce<KT_CLUSTER, 1>(row_reduce<0, 1, 1>(q, Sum(), 0.f), Sum()) / (float)hidden;
  const float inv = rsqrtf(var + eps);
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    float g[KT_VEC], b[KT_VEC];
    gs.item(i, g);
    bs.item(i, b);
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = (v[i][j] - mean) * inv * g[j] + b[j];
  }
  row_store<0, KT_VEC, IT>(out + off, len, vec, v);
}

template <typename T, typename W>
__device__ __forceinline__ void layer_norm_cluster(T* out, const T* x, const W* gamma, const W* beta, float eps,
                                                   int rows, int hidden) {
  KT_DISPATCH_ITEMS((int)blockDim.x, (cluster_slice<KT_CLUSTER, KT_VEC>(hidden)),
                    (layer_norm_cluster_impl<IT, T, W>(out, x, gamma, beta, eps, rows, hidden)));
}

}  // namespace kt
