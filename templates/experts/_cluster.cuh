// kerntune expert templates: one row split over the blocks of a thread-block cluster (Hopper, sm_90). An expert
// that lists this file in `helpers` gets it inside its own `namespace kt {` (agent_core.experts.bind), after
// _common.cuh; the expert includes <cooperative_groups.h> itself and is launched with rows * CLUSTER blocks,
// the CLUSTER blocks of a cluster (consecutive block indices) sharing one row.

// The slice of a row of n elements that this block of the cluster works on: [begin, begin + len). Slices are
// whole vectors (a multiple of VEC elements) and in order of the block's rank in the cluster; the last ones
// may be shorter or empty.
template <int CLUSTER, int VEC>
__device__ __forceinline__ int cluster_slice(int n) {
  return ((n + CLUSTER - 1) / CLUSTER + VEC - 1) / VEC * VEC;
}

template <int CLUSTER, int VEC>
__device__ __forceinline__ void cluster_chunk(int n, int& begin, int& len) {
  const int per = cluster_slice<CLUSTER, VEC>(n);
  const int rank = (int)cooperative_groups::this_cluster().block_rank();
  begin = min(n, rank * per);
  len = min(n, begin + per) - begin;
}

// Combine one value per block over the CLUSTER blocks of the cluster: every thread passes its block's value
// (from row_reduce) and gets the cluster's, combined in rank order (the same in every block). SLOT names the
// shared word of this reduction (consecutive reductions of one kernel use different slots). Two cluster barriers:
// the first publishes every block's value, the second keeps each block's shared memory alive until every block
// has read it. Every thread of every block of the cluster must call it (no thread may have returned).
template <int CLUSTER, int SLOT, typename Op>
__device__ __forceinline__ float cluster_reduce(float v, Op op) {
  __shared__ float slot;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  if (threadIdx.x == 0 && threadIdx.y == 0) slot = v;
  cluster.sync();
  float r = *cluster.map_shared_rank(&slot, 0);
#pragma unroll
  for (int b = 1; b < CLUSTER; ++b) r = op(r, *cluster.map_shared_rank(&slot, b));
  cluster.sync();
  return r;
}

// A weight's slice (one W per element of the block's slice), read in the order of row_load: held in registers
// where there are few items (loaded before the reductions, so their latency passes under them), else read item
// by item where it is used (no spills at 1024 threads, where a thread has 64 registers). HOLD: the most IT * VEC
// held; a kernel that holds two weights (layer_norm: gamma and beta) passes half.
template <int IT, int VEC, typename W, int HOLD = 16>
struct SliceWeights {
  static constexpr bool kHold = IT * VEC <= HOLD;
  float v[kHold ? IT : 1][VEC];
  const W* p;
  int n;
  bool vec;
  __device__ __forceinline__ SliceWeights(const W* p_, int n_, bool vec_) : p(p_), n(n_), vec(vec_) {
    if constexpr (kHold) row_load<0, VEC, IT>(p, n, vec, v);
  }
  __device__ __forceinline__ void item(int i, float (&out)[VEC]) const {
    if constexpr (kHold) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) out[j] = v[i][j];
    } else {
      row_load_item<0, VEC, IT>(p, n, vec, i, out);
    }
  }
};
