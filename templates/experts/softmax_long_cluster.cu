/* kerntune-expert:
name = "softmax_long_cluster"
family = "softmax"
description = "Row softmax over a vocabulary (Hopper): each row split over the CLUSTER blocks of a thread-block cluster, each block working on its slice (the row's length over CLUSTER, rounded up to a vector). Two ways, by STAGE. STAGE 0 reads the row once: each block holds its slice in registers (THREADS * VEC * ITEMS values must cover it, and at most 32768 of them: above 16384 ptxas spills a few bytes, yet on the H100 the 32768 of 1024 x 4 x 8 moved an fp32 vocabulary row faster than STAGE 1 did), the max and then the sum of exp(x - max) reduced over the block and then over the cluster (distributed shared memory: two cluster reductions, four cluster barriers). STAGE 1 reads the slice twice, like softmax_long (the same online passes): each thread a running max and sum of expf(x - max), the block's (max, sum) pair, the pairs combined over the cluster in one exchange (two cluster barriers, the second waited for only after the write), then the normalized write re-reading the slice (from L2 by then); it needs few registers (64 at most), so several blocks share an SM and one block's loads overlap another's reductions and stores, and it holds any row length. The cluster twin of softmax_long, at any row count (not a regime of few rows: the planner tries it right after softmax_long). Plain and scaled/divided conventions, FAST_MATH, the division and the streaming second read as softmax_long. A row whose length is not a multiple of VEC: STAGE 0 takes scalar accesses, STAGE 1 keeps 16-byte ones and peels each slice's first and last few elements."
function = "kt::softmax_long_cluster"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "rows: i32", "hidden: i32"]
constraints = ["VEC * ESIZE <= 16", "STAGE == 1 or THREADS * VEC * ITEMS >= round_up(cdiv(hidden, CLUSTER), VEC)", "STAGE == 1 or THREADS * VEC * ITEMS <= 32768", "STAGE == 0 or ITEMS <= 4"]
helpers = ["_cluster.cuh", "_logits.cuh", "_online.cuh"]

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
why = "most threads per block: the launch gives each block min(THREADS, ceil(slice / (VEC * ITEMS)) rounded up to a warp), the slice being ceil(hidden / CLUSTER) rounded up to a vector (STAGE 1: enough threads for each to load ITEMS vectors at a time)"

[params.VEC]
values = [1, 2, 4, 8]
default = 4
kind = "vector_width"
why = "elements per load/store: 16 bytes at most. STAGE 0 falls back to scalar accesses where the row's length is not a multiple of VEC or a pointer is not aligned; STAGE 1 only where a pointer is not aligned (a slice that starts or ends inside a vector has those few elements read and written one at a time)"

[params.ITEMS]
values = [1, 2, 4, 8]
default = 2
kind = "items_per_thread"
why = "STAGE 0: vectors each thread keeps in registers (THREADS * VEC * ITEMS must cover the slice; a slice that needs fewer uses the fewest that cover it). STAGE 1: vectors each thread loads before it folds them into its running max and sum (loads in flight per thread, at most 4)"

[params.STAGE]
values = [0, 1]
default = 1
kind = "algorithm"
why = "0: the slice held in registers, the row read once (four cluster barriers; up to 64 values a thread: at the capacities a vocabulary row needs 50 to 126 registers a thread, one block an SM, its load, reduce and store phases never overlapping another block's); 1: the slice read twice, an online max-and-sum pass then the normalized write from L2 (one exchange of (max, sum) pairs over the cluster; 26 to 63 registers a thread, several blocks an SM)"

[params.FAST_MATH]
values = [0, 1]
default = 0
kind = "fast_math"
why = "the exponentials of the two passes (one or two an element): 0 expf; 1 the hardware's 2^x of d * log2(e) (ex2.approx: two instructions against about eight, within a few ulp; the H100 moved vocabulary rows 5-12% faster with it); verification at the spec's tolerance keeps it or not"

[launch]
grid = ["rows * CLUSTER"]
block = ["min(THREADS, round_up(cdiv(round_up(cdiv(hidden, CLUSTER), VEC), VEC * ITEMS), 32))"]
bounds = "THREADS"
cluster = "CLUSTER"
smem = "0"
*/
// kt:bind KT_EXPERT_LOGIT_DIVIDE = 0  (general form: 0: the logits times scale; 1: divided by it (a temperature passed by value), the kernel's own rounding)
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
#define KT_ITEMS 2
#endif
#ifndef KT_STAGE
#define KT_STAGE 1
#endif
#ifndef KT_FAST_MATH
#define KT_FAST_MATH 0
#endif
#include <cooperative_groups.h>

namespace kt {

// STAGE 0: the block's slice of one row, in registers: softmax over the whole row (the cluster's), FN the logit of
// a value. VP: the vector path (the whole row a multiple of VEC, pointers aligned: every block's slice is), compiled
// apart from the scalar one; the choice is the same for every block of the cluster.
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
      const float e = row_elem<0, KT_VEC, IT>(vec, i, j) < len ? exp_rel<KT_FAST_MATH>(v[i][j] - m) : 0.f;
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

// STAGE 1: the blocks' (max, sum of expf(x - max)) pairs combined over the cluster in one exchange: every thread
// gets the row's m = max of the blocks' maxima and s = sum of s_b * expf(m_b - m), in rank order (the same in every
// block). The first cluster barrier publishes the pairs: only thread 0 wrote its block's, so only it fences
// (release at cluster scope) and every thread arrives relaxed (a release arrive costs each thread a GPU-wide memory
// barrier, which stalled the warps here). The second (every block's pair read before any block exits) is split and
// relaxed too: this arrives once the pairs are used (the reads complete), cluster_online_done waits, after the
// block's write pass.
template <int CLUSTER>
__device__ __forceinline__ void cluster_online_reduce(float& m, float& s) {
  __shared__ float2 pair;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  if (threadIdx.x == 0) {
    pair = make_float2(m, s);
    asm volatile("fence.acq_rel.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
  float2 p[CLUSTER];
#pragma unroll
  for (int b = 0; b < CLUSTER; ++b) p[b] = *cluster.map_shared_rank(&pair, b);
  m = p[0].x;
#pragma unroll
  for (int b = 1; b < CLUSTER; ++b) m = fmaxf(m, p[b].x);
  s = 0.f;
#pragma unroll
  for (int b = 0; b < CLUSTER; ++b) s += p[b].x == -INFINITY ? 0.f : p[b].y * expf(p[b].x - m);
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");  // done with the others' shared memory
}

// The end of cluster_online_reduce's second barrier: no block of the cluster exits (freeing its shared pair)
// before every block has read it.
__device__ __forceinline__ void cluster_online_done() { __cluster_barrier_wait(); }

// STAGE 1: the block's slice read twice (_online.cuh): the online pass (KT_ITEMS vectors a thread in flight, then
// the block's pair), the cluster's pair, then the normalized write pass re-reading the slice (from L2 by then).
// Slices start at multiples of VEC from the row's start: with aligned bases a slice sits lead = the row's offset
// mod VEC past an aligned address, and its first and last few elements are peeled (RowSplit), any row length.
template <typename T, typename O, typename FN>
__device__ __forceinline__ void softmax_slice_online(O* out, const T* x, long long row, int hidden, bool vec, FN fn) {
  int begin, len;
  cluster_chunk<KT_CLUSTER, KT_VEC>(hidden, begin, len);
  const long long off = row * hidden + begin;
  const int lead = (int)(off % KT_VEC);
  float m, s;
  online_pass<KT_VEC, KT_ITEMS, KT_FAST_MATH, T>(x + off, len, vec, lead, fn, m, s);
  cluster_online_reduce<KT_CLUSTER>(m, s);
  normalized_pass<KT_VEC, KT_FAST_MATH, T, O>(out + off, x + off, len, vec, lead, fn, m, s);
  cluster_online_done();
}

// This block's slice of the row: STAGE 0 on the path the whole row allows (the same for every block of the
// cluster), STAGE 1 on the peeled vector path wherever the bases are aligned.
template <typename T, typename O, typename FN>
__device__ __forceinline__ void softmax_row_slices(O* out, const T* x, long long row, int hidden, FN fn) {
  if constexpr (KT_STAGE == 1) {
    softmax_slice_online<T, O>(out, x, row, hidden, vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out), fn);
  } else if (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out)) {
    KT_DISPATCH_ITEMS((int)blockDim.x, (cluster_slice<KT_CLUSTER, KT_VEC>(hidden)),
                      (softmax_slice<IT, true, T, O>(out, x, row, hidden, fn)));
  } else {
    KT_DISPATCH_ITEMS((int)blockDim.x, (cluster_slice<KT_CLUSTER, KT_VEC>(hidden)),
                      (softmax_slice<IT, false, T, O>(out, x, row, hidden, fn)));
  }
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
    softmax_row_slices<T, O>(out, x, row, hidden, LogitScaleDiv<KT_EXPERT_LOGIT_DIVIDE>{scale, row_div[row]});
  else
    softmax_row_slices<T, O>(out, x, row, hidden, LogitScale<KT_EXPERT_LOGIT_DIVIDE>{scale});
}
#endif  // kt:bind

}  // namespace kt
