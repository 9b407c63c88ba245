// LayerNorm as DeepSpeed's inference kernels write it (fused_ln): a template over the unroll count, the threads per
// row and the block's maximum thread count, chosen by the host from the row length: rows of at most 128 elements
// are packed several to a block (a group of threads_per_row threads each, blockDim.y groups), longer rows get one
// block of min(next_pow2(ceil(elems / 16)), 256) threads and UNROLL = 2 x ceil(elems / (threads * 16)) loads per
// thread. Each thread loads 16-byte chunks (8 halves, a union of uint4 and __half[8]) kept in registers; the row's
// mean and then its exact centered variance come from those registers, each reduced over the row's threads with
// cooperative-groups tiles (a tile of the row's lanes, then the warps' partials through shared memory when a row
// spans warps). rstd = __frsqrt_rn(var + eps). The normalization itself is done in half arithmetic, as the original
// does: mean and rstd are rounded to fp16 and y = ((x - mean) * rstd) * gamma + beta is computed with __hsub /
// __hmul / __hadd on halves. elems_per_row must be a multiple of 8. Spec = <UNROLL 2, 256 threads per row, 256>,
// what the host picks for rows of 2049..4096 halves.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <algorithm>
#include <cassert>
#include <cstdint>

namespace cg = cooperative_groups;

namespace ln {
constexpr int granularity = 16;  // bytes per load
constexpr int kWarpSize = 32;

union HalfChunk {
  uint4 raw;
  __half h[granularity / sizeof(__half)];
};

// Sum of v over the threads of one row (threads_per_row consecutive threads of the block).
template <int threads_per_row>
__device__ __forceinline__ float row_reduce_sum(cg::thread_block& tb, float v) {
  constexpr int kTileLanes = threads_per_row < kWarpSize ? threads_per_row : kWarpSize;
  cg::thread_block_tile<kTileLanes> tile = cg::tiled_partition<kTileLanes>(tb);
#pragma unroll
  for (int offset = kTileLanes / 2; offset > 0; offset /= 2) v += tile.shfl_xor(v, offset);
  if constexpr (threads_per_row > kWarpSize) {
    // one row per block here: the warps' partials through shared memory
    constexpr int kWarps = threads_per_row / kWarpSize;
    __shared__ float partials[kWarps];
    if (tile.thread_rank() == 0) partials[tile.meta_group_rank()] = v;
    tb.sync();
    v = tile.thread_rank() < kWarps ? partials[tile.thread_rank()] : 0.0f;
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += tile.shfl_xor(v, offset);
    tb.sync();  // partials is reused by the next reduction
  }
  return v;
}
}  // namespace ln

/* kerntune:
args  = ["output: out f16[rows * elems_per_row]", "vals: in f16[rows * elems_per_row]", "gamma: in f16[elems_per_row]",
         "beta: in f16[elems_per_row]", "epsilon: f32 = 1e-5", "rows: i32 = rows",
         "elems_per_row: i32 = elems_per_row"]
sizes = [{ rows = 8192, elems_per_row = 4096 }, { rows = 4, elems_per_row = 4096 }, { rows = 1001, elems_per_row = 2056 }]
grid  = "rows"
block = [256, 1]
template_args = ["2", "256", "256"]
*/
template <int UNROLL, int threads_per_row, int max_threads>
__global__ void fused_ln_kernel(__half* output, const __half* vals, const __half* gamma, const __half* beta,
                                float epsilon, int rows, int elems_per_row) {
  constexpr int T_per_load = ln::granularity / sizeof(__half);
  cg::thread_block tb = cg::this_thread_block();

  const int row = tb.group_index().x * (max_threads / threads_per_row) + tb.thread_index().y;
  if (row >= rows) return;  // a whole row group at a time: no barrier is shared across rows
  const int64_t row_offset = static_cast<int64_t>(row) * elems_per_row;
  const int thread_offset = tb.thread_index().x * T_per_load;
  constexpr int stride = threads_per_row * T_per_load;

  ln::HalfChunk local_buffer[UNROLL];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < UNROLL; i++) {
    const int idx = i * stride + thread_offset;
    if (idx < elems_per_row) {
      local_buffer[i].raw = *reinterpret_cast<const uint4*>(vals + row_offset + idx);
    } else {
      local_buffer[i].raw = make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int j = 0; j < T_per_load; j++) sum += __half2float(local_buffer[i].h[j]);
  }
  sum = ln::row_reduce_sum<threads_per_row>(tb, sum);
  const float mean = sum / elems_per_row;

  float mean_diff = 0.0f;
#pragma unroll
  for (int i = 0; i < UNROLL; i++) {
    if (i * stride + thread_offset < elems_per_row) {
#pragma unroll
      for (int j = 0; j < T_per_load; j++) {
        const float diff = __half2float(local_buffer[i].h[j]) - mean;
        mean_diff += diff * diff;
      }
    }
  }
  mean_diff = ln::row_reduce_sum<threads_per_row>(tb, mean_diff);
  const float variance = mean_diff / elems_per_row;
  const float denom = __frsqrt_rn(variance + epsilon);

  const __half mean_compute = __float2half(mean);
  const __half denom_compute = __float2half(denom);
  __half* row_output = output + row_offset;

#pragma unroll
  for (int i = 0; i < UNROLL; i++) {
    const int idx = i * stride + thread_offset;
    if (idx < elems_per_row) {
      ln::HalfChunk gamma_local, beta_local;
      gamma_local.raw = *reinterpret_cast<const uint4*>(gamma + idx);
      beta_local.raw = *reinterpret_cast<const uint4*>(beta + idx);
#pragma unroll
      for (int j = 0; j < T_per_load; j++) {
        __half v = __hmul(__hsub(local_buffer[i].h[j], mean_compute), denom_compute);
        local_buffer[i].h[j] = __hadd(__hmul(v, gamma_local.h[j]), beta_local.h[j]);
      }
      *reinterpret_cast<uint4*>(row_output + idx) = local_buffer[i].raw;
    }
  }
}

static int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

#define LAUNCH_FUSED_LN(unroll, threads_per_row, block_threads) \
  fused_ln_kernel<unroll, threads_per_row, block_threads>         \
      <<<grid, block, 0, stream>>>(output, vals, gamma, beta, epsilon, rows, elems_per_row)

// output, vals: [rows, elems_per_row] fp16; gamma, beta: [elems_per_row] fp16. Device pointers, 16-byte aligned;
// elems_per_row a multiple of 8 and at most 16384.
void launch_fused_ln(__half* output, const __half* vals, const __half* gamma, const __half* beta, float epsilon,
                     int rows, int elems_per_row, cudaStream_t stream) {
  constexpr int T_per_load = ln::granularity / sizeof(__half);  // 8
  constexpr int max_threads = 256;
  constexpr int internal_unroll = 2;  // halves: two 16-byte loads per step
  assert(elems_per_row % T_per_load == 0 && elems_per_row <= 16384);
  if (rows == 0) return;

  const bool sub_block = elems_per_row <= 128;
  const int h_per_step = sub_block ? T_per_load : T_per_load * internal_unroll;
  const int one_step_threads = next_pow2((elems_per_row + h_per_step - 1) / h_per_step);
  const int threads_per_row = std::min(one_step_threads, max_threads);
  const int rows_per_block_max = sub_block ? max_threads / threads_per_row : 1;
  const int rows_per_block = std::min(rows, rows_per_block_max);
  dim3 block(threads_per_row, rows_per_block);
  dim3 grid((rows + rows_per_block - 1) / rows_per_block);

  const int elems_per_step = threads_per_row * h_per_step;
  const int external_unroll = (elems_per_row + elems_per_step - 1) / elems_per_step;

  if (sub_block) {
    switch (threads_per_row) {
      case 1: LAUNCH_FUSED_LN(1, 1, max_threads); break;
      case 2: LAUNCH_FUSED_LN(1, 2, max_threads); break;
      case 4: LAUNCH_FUSED_LN(1, 4, max_threads); break;
      case 8: LAUNCH_FUSED_LN(1, 8, max_threads); break;
      default: LAUNCH_FUSED_LN(1, 16, max_threads); break;
    }
  } else if (threads_per_row < max_threads) {
    // 129 .. 2048 elements: one step of 16 halves per thread, one row of 16 .. 128 threads per block
    switch (threads_per_row) {
      case 16: LAUNCH_FUSED_LN(internal_unroll, 16, 16); break;
      case 32: LAUNCH_FUSED_LN(internal_unroll, 32, 32); break;
      case 64: LAUNCH_FUSED_LN(internal_unroll, 64, 64); break;
      default: LAUNCH_FUSED_LN(internal_unroll, 128, 128); break;
    }
  } else if (external_unroll == 1) {
    LAUNCH_FUSED_LN(1 * internal_unroll, max_threads, max_threads);  // 2049 .. 4096
  } else if (external_unroll == 2) {
    LAUNCH_FUSED_LN(2 * internal_unroll, max_threads, max_threads);  // 4097 .. 8192
  } else if (external_unroll == 3) {
    LAUNCH_FUSED_LN(3 * internal_unroll, max_threads, max_threads);  // 8193 .. 12288
  } else {
    LAUNCH_FUSED_LN(4 * internal_unroll, max_threads, max_threads);  // 12289 .. 16384
  }
}
