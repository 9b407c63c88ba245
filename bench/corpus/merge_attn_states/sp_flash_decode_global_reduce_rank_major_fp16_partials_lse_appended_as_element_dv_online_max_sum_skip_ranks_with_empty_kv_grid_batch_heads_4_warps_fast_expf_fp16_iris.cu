// Sequence-parallel flash-decoding, the cross-rank combine, in the style of Iris (ROCm/iris,
// examples/13_flash_decode/decode_kernels.py: gqa_global_reduce_fused, launched by FDFusedLayer.forward in
// examples/13_flash_decode/fd_fused_layer.py after gqa_local_kernels_fused; Iris is AMD's Triton-based multi-GPU
// programming framework with a symmetric heap and device-side load/store/atomics across GPUs, and the example is
// adapted from ByteDance's Triton-distributed flash_decode layer), written as the CUDA port of that Triton program:
//   The KV cache of every sequence is sharded over NUM_KV_SPLITS = num_ranks GPUs. Each rank has already combined its
//   own 32 split-K partials and pushed ONE partial state per (batch, head) into every rank's gathered buffer, so the
//   kernel merges num_ranks partial states. gathered [num_ranks, max_batch, q_heads, Lv + 1] fp16, RANK-MAJOR, each
//   (rank, batch, head) row holding the rank's partial output (already divided by its own sum of exponentials) in
//   elements [0, Lv) and its natural-log lse APPENDED AS ELEMENT Lv of the same fp16 row (rounded to fp16 like the
//   outputs); global_kv_lens [num_ranks, batch] int32 (the row of rank r is `batch` apart): a rank whose shard of the
//   sequence is empty (kv length 0) is skipped; out [batch, q_heads, Lv] fp16 (q's dtype), no merged lse written.
//   Argument order as Iris minus the signal flags: (All_Ranks_Mid_O, o, B_Seqlens, batch, q_heads, stride_mid_ob,
//   stride_mid_oh, stride_mid_os, stride_obs, stride_oh, NUM_KV_SPLITS, Lv) with stride_mid_os the RANK stride
//   (gathered.stride(0)), stride_mid_ob = gathered.stride(1), stride_mid_oh = gathered.stride(2).
//   One program per (batch, head): grid (batch, q_heads), Triton's default 4 warps (128 threads), BLOCK_DV =
//   next_power_of_2(Lv) a template argument (spec <__half, 128>); the [BLOCK_DV] accumulator spread over the 128
//   threads (column d in thread d % 128), the scalars e_max / e_sum kept (and the lse loaded) by every thread as the
//   Triton program broadcasts them. Online merge over the ranks in order: n_e_max = max(lse, e_max), old_scale =
//   exp(e_max - n_e_max), acc = acc * old_scale + exp(lse - n_e_max) * v, e_sum likewise; exp is
//   libdevice.fast_expf (__expf); out = acc / e_sum, 0 where e_sum == 0 (every rank empty), one rounding to fp16.
//   int32 offsets as Triton computes them.
// No bug found. Changed: the per-tile wait on the signal flags (tl.atomic_cas spin on signal_flags[my_rank, src,
// batch, head] with acquire semantics) is dropped: on one GPU the gathered buffer is complete before the launch;
// my_rank and the flag strides go with it; NUM_KV_SPLITS, Lv (constexprs) are runtime arguments; '/' is an IEEE
// division here (Triton's fp32 division is div.full); the torch module became a C++ launcher with device pointers,
// sizes and a stream (fp16 and bf16 instantiated).
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace iris_flash_decode {

constexpr int kNumWarps = 4;  // gqa_global_reduce_fused[(batch, q_heads)](...) without num_warps: Triton's default
constexpr int kThreads = kNumWarps * 32;

__device__ __forceinline__ float load_f32(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float load_f32(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_as(__half* p, float v) { *p = __float2half(v); }
__device__ __forceinline__ void store_as(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

/* kerntune:
args  = ["All_Ranks_Mid_O: in f16[R * B * H * (D + 1)] ~ uniform(-4, 12)", "o: out f16[B * H * D]",
         "B_Seqlens: in i32[R * B] ~ randint(0, 4)", "batch: i32 = B", "q_heads: i32 = H",
         "stride_mid_ob: i32 = H * (D + 1)", "stride_mid_oh: i32 = D + 1", "stride_mid_os: i32 = B * H * (D + 1)",
         "stride_obs: i32 = H * D", "stride_oh: i32 = D", "NUM_KV_SPLITS: i32 = R", "Lv: i32 = D"]
sizes = [{ R = 8, B = 512, H = 64, D = 128 }, { R = 8, B = 4, H = 32, D = 128 }, { R = 3, B = 5, H = 7, D = 80 }]
grid  = ["B", "H"]
block = 128
template_args = ["__half", "128"]
*/
template <typename T, int BLOCK_DV>
__global__ void __launch_bounds__(kThreads)
    gqa_global_reduce_fused(const T* __restrict__ All_Ranks_Mid_O, T* __restrict__ o,
                            const int* __restrict__ B_Seqlens, int batch, int q_heads, int stride_mid_ob,
                            int stride_mid_oh, int stride_mid_os, int stride_obs, int stride_oh, int NUM_KV_SPLITS,
                            int Lv) {
  constexpr int PER = (BLOCK_DV + kThreads - 1) / kThreads;  // accumulator columns per thread
  const int cur_batch = blockIdx.x;
  const int cur_head = blockIdx.y;

  const int* cur_batch_seq_len_ptr = B_Seqlens + cur_batch;

  float e_sum = 0.0f;
  float e_max = -INFINITY;
  float acc[PER];
#pragma unroll
  for (int j = 0; j < PER; ++j) acc[j] = 0.0f;

  // Iterate through all source ranks to gather partial results
  for (int source_rank_id = 0; source_rank_id < NUM_KV_SPLITS; ++source_rank_id) {
    // (Iris first spins on this tile's signal flag from source_rank_id; not needed on one GPU)
    const int effective_kv_len = cur_batch_seq_len_ptr[source_rank_id * batch];

    if (effective_kv_len > 0) {
      // Load the data for the tile from the source rank
      const int base_ptr = cur_batch * stride_mid_ob + cur_head * stride_mid_oh + source_rank_id * stride_mid_os;
      const int offs_logic = base_ptr + Lv;

      const float tlogic = load_f32(All_Ranks_Mid_O + offs_logic);

      // Combine the partial result using softmax reduction
      const float n_e_max = fmaxf(tlogic, e_max);
      const float old_scale = __expf(e_max - n_e_max);
#pragma unroll
      for (int j = 0; j < PER; ++j) acc[j] *= old_scale;

      const float exp_logic = __expf(tlogic - n_e_max);
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        const int d = j * kThreads + threadIdx.x;  // offs_d, masked by offs_d < Lv
        const float tv = (d < BLOCK_DV && d < Lv) ? load_f32(All_Ranks_Mid_O + base_ptr + d) : 0.0f;
        acc[j] += exp_logic * tv;
      }

      e_sum = e_sum * old_scale + exp_logic;
      e_max = n_e_max;
    }
  }

#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int d = j * kThreads + threadIdx.x;
    if (d < BLOCK_DV && d < Lv) {
      float final_out = acc[j] / e_sum;
      final_out = (e_sum == 0.0f) ? 0.0f : final_out;
      store_as(o + cur_batch * stride_obs + cur_head * stride_oh + d, final_out);
    }
  }
}

template <typename T, int BLOCK_DV>
static void launch_global_reduce(const T* gathered, T* final_output, const int* global_kv_lens, int num_ranks,
                                 int batch, int max_batch, int num_q_heads, int v_head_dim, cudaStream_t stream) {
  const int stride_mid_ob = num_q_heads * (v_head_dim + 1);              // gathered_buffer.stride(1)
  const int stride_mid_oh = v_head_dim + 1;                              // gathered_buffer.stride(2)
  const int stride_mid_os = max_batch * num_q_heads * (v_head_dim + 1);  // gathered_buffer.stride(0): rank stride
  const int stride_obs = num_q_heads * v_head_dim;                       // final_output.stride(0)
  const int stride_oh = v_head_dim;                                      // final_output.stride(1)
  const dim3 grid(batch, num_q_heads);
  gqa_global_reduce_fused<T, BLOCK_DV><<<grid, kThreads, 0, stream>>>(
      gathered, final_output, global_kv_lens, batch, num_q_heads, stride_mid_ob, stride_mid_oh, stride_mid_os,
      stride_obs, stride_oh, num_ranks, v_head_dim);
}

}  // namespace iris_flash_decode

// gathered: device [num_ranks, max_batch, num_q_heads, v_head_dim + 1] (every rank's combined partial output with
// its lse appended, in q's dtype); global_kv_lens: [num_ranks, batch] int32; final_output: [batch, num_q_heads,
// v_head_dim]. batch <= max_batch (the symmetric-heap buffer is allocated once for max_allowed_batch).
template <typename T>
void fd_global_reduce(const T* gathered, T* final_output, const int* global_kv_lens, int num_ranks, int batch,
                      int max_batch, int num_q_heads, int v_head_dim, cudaStream_t stream) {
  assert(batch <= max_batch && "batch exceeds max_allowed_batch");
  if (batch == 0 || num_q_heads == 0) return;
  int block_dv = 1;  // triton.next_power_of_2(v_head_dim)
  while (block_dv < v_head_dim) block_dv *= 2;
  switch (block_dv) {
    case 64:
      iris_flash_decode::launch_global_reduce<T, 64>(gathered, final_output, global_kv_lens, num_ranks, batch,
                                                     max_batch, num_q_heads, v_head_dim, stream);
      break;
    case 128:
      iris_flash_decode::launch_global_reduce<T, 128>(gathered, final_output, global_kv_lens, num_ranks, batch,
                                                      max_batch, num_q_heads, v_head_dim, stream);
      break;
    case 256:
      iris_flash_decode::launch_global_reduce<T, 256>(gathered, final_output, global_kv_lens, num_ranks, batch,
                                                      max_batch, num_q_heads, v_head_dim, stream);
      break;
    default:
      assert(false && "v_head_dim out of range");
  }
}

template void fd_global_reduce<__half>(const __half*, __half*, const int*, int, int, int, int, int, cudaStream_t);
template void fd_global_reduce<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, const int*, int, int, int, int,
                                              int, cudaStream_t);
