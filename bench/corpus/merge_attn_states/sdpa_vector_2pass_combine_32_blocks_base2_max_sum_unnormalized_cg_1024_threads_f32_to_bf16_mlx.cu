// Second pass of a two-pass decode attention in the style of Apple MLX's CUDA backend
// (mlx/backend/cuda/scaled_dot_product_attention.cu: kernel_sdpav_2pass_2<T, do_causal, D>, launched by
// sdpa_vector_2pass_fallback after kernel_sdpav_2pass_1), f32 partials -> bf16:
//   the first pass splits the keys into blocks = 32 groups; each leaves, per (batch, head, query, group), an
//   UNNORMALIZED fp32 partial output (sum of exp2(s - m) * v), its running max m in the BASE-2 log domain (scores
//   were scaled by scale * log2(e)) and its sum of exp2(s - m): partials [B, H, qL, 32, D], sums and maxs
//   [B, H, qL, 32]
//   this pass: one block per (head, query, batch), grid (H, qL, B), 1024 threads = 32 warps; every warp reads the 32
//   (max, sum) pairs, one per lane, and reduces them with cooperative_groups (cg::reduce greater / plus):
//   M = max m_i, factor_i = exp2f(m_i - M), S = sum sums_i * factor_i, inverted once with __frcp_rn (0 if S is 0);
//   warp w holds group w's partial, D / 32 values per lane; the 32 x 32 tile goes through __shared__
//   float[32][33] (transposed, one column of padding) once per value, each warp then sums its column over the
//   groups with cg::reduce, times 1 / S; lane 0 of each warp writes its D / 32 outputs (one static_cast to bf16)
//   through the output's (batch, head, sequence) strides
// MLX's PRAGMA_LOOP_UNROLL macro is written as #pragma unroll; its __grid_constant__ AttnParams struct is passed as
// the fields this pass reads (H, qL and the output strides; B comes from the grid); the partial / sum / max offsets
// are int as in MLX; the head_dim dispatch (64 / 96 / 128) is kept, launched with <<<>>> on a stream instead of
// MLX's command encoder; spec = <__nv_bfloat16, false, 128>.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace mlx::core {

namespace cu {

namespace cg = cooperative_groups;

/* kerntune:
args  = ["partials: in f32[B * H * qL * 32 * 128]", "sums: in f32[B * H * qL * 32] ~ uniform(1, 64)",
         "maxs: in f32[B * H * qL * 32] ~ uniform(-4, 12)", "O: out bf16[B * H * qL * 128]",
         "H: i32 = H", "qL: i32 = qL", "O_stride_b: i64 = H * qL * 128", "O_stride_h: i64 = qL * 128",
         "O_stride_s: i64 = 128"]
sizes = [{ B = 128, H = 64, qL = 1 }, { B = 2, H = 32, qL = 1 }, { B = 7, H = 28, qL = 3 }]
grid  = ["H", "qL", "B"]
block = 1024
template_args = ["__nv_bfloat16", "false", "128"]
*/
template <typename T, bool do_causal, int D>
__global__ void kernel_sdpav_2pass_2(
    const float* partials,
    const float* sums,
    const float* maxs,
    T* O,
    const int H,
    const int qL,
    const int64_t O_stride_b,
    const int64_t O_stride_h,
    const int64_t O_stride_s) {
  constexpr int BN = 32;
  constexpr int BD = 32;
  constexpr int blocks = 32;

  constexpr int v_per_thread = D / BD;

  typedef float U;

  U o[v_per_thread];
  __shared__ U outputs[BN][BD + 1];

  auto block = cg::this_thread_block();
  auto warp = cg::tiled_partition<32>(block);

  const int lane_idx = warp.thread_rank();
  const int warp_idx = warp.meta_group_rank();

  // this block's (batch, head, query)
  const int batch_idx = blockIdx.z;
  const int head_idx = blockIdx.x;
  const int q_seq_idx = blockIdx.y;

  const int p_stride_s = blocks;
  const int p_stride_h = qL * p_stride_s;
  const int p_stride_b = H * p_stride_h;
  const int p_offset = batch_idx * p_stride_b + // batch
      head_idx * p_stride_h + // head
      q_seq_idx * p_stride_s; // sequence

  partials += p_offset * D + warp_idx * D;
  sums += p_offset;
  maxs += p_offset;

  O += batch_idx * O_stride_b + // batch
      head_idx * O_stride_h + // head
      q_seq_idx * O_stride_s; // sequence

  U max_score = maxs[lane_idx];
  U new_max = cg::reduce(warp, max_score, cg::greater<U>());
  U factor = exp2f(max_score - new_max);
  U sum_exp_score = cg::reduce(warp, sums[lane_idx] * factor, cg::plus<U>());
  sum_exp_score = sum_exp_score == 0 ? 0 : __frcp_rn(sum_exp_score);

  #pragma unroll
  for (int i = 0; i < v_per_thread; i++) {
    o[i] = partials[v_per_thread * lane_idx + i];
  }

  // aggregate the 32 groups' outputs
  #pragma unroll
  for (int i = 0; i < v_per_thread; i++) {
    outputs[lane_idx][warp_idx] = o[i];
    block.sync();
    U ot = outputs[warp_idx][lane_idx] * factor;
    o[i] = cg::reduce(warp, ot, cg::plus<U>()) * sum_exp_score;
    block.sync();
  }

  // write the output
  if (lane_idx == 0) {
    #pragma unroll
    for (int i = 0; i < v_per_thread; i++) {
      O[v_per_thread * warp_idx + i] = static_cast<T>(o[i]);
    }
  }
}

} // namespace cu

namespace {

template <typename F>
void dispatch_headdim(int n, F&& f) {
  switch (n) {
    case 64:
      f(std::integral_constant<int, 64>{});
      break;
    case 96:
      f(std::integral_constant<int, 96>{});
      break;
    case 128:
      f(std::integral_constant<int, 128>{});
      break;
  }
}

} // namespace

// partials: [B, H, qL, 32, D] f32; sums, maxs: [B, H, qL, 32] f32 (maxs in the base-2 domain);
// o: [B, H, qL, D] bf16, contiguous. Device pointers.
void sdpa_vector_2pass_combine(
    const float* partials,
    const float* sums,
    const float* maxs,
    __nv_bfloat16* o,
    int B,
    int H,
    int qL,
    int D,
    cudaStream_t stream) {
  const int64_t O_strides[3] = {int64_t(H) * qL * D, int64_t(qL) * D, int64_t(D)};

  dim3 grid_dim(H, qL, B);
  dim3 block_dim(1024, 1, 1);

  dispatch_headdim(D, [&](auto headdim) {
    auto kernel = cu::kernel_sdpav_2pass_2<__nv_bfloat16, false, headdim.value>;
    kernel<<<grid_dim, block_dim, 0, stream>>>(
        partials, sums, maxs, o, H, qL, O_strides[0], O_strides[1], O_strides[2]);
  });
}

} // namespace mlx::core
