// The split-KV combine of llama.cpp's ggml-cuda flash attention (fattn-common.cuh, flash_attn_combine_results):
// the attention kernel ran with parallel_blocks blocks per output row, each over a slice of the KV sequence, and
// wrote its partial result UNNORMALIZED (sum_k exp(s_k - m) v_k, not divided by its row sum) together with a
// float2 meta (m: its running max of the scores, l: its row sum of exp(s - m)). The combine:
//   kqmax = max_l m_l
//   w_l   = expf(m_l - kqmax), flushed to 0 when m_l - kqmax <= SOFTMAX_FTZ_THRESHOLD (-20): ggml's flush-to-zero,
//           done on the bits of the float by an all-ones / all-zeros mask
//   dst   = sum_l w_l * VKQ_parts[l] / sum_l w_l * l_l
// fp32 throughout. Layouts as ggml has them: dst is the permuted [ne03 sequences, ne01 query columns, ne02 heads,
// D] tensor, and the partials and metas follow the same row order with the parallel_blocks index inside:
// VKQ_parts [rows, parallel_blocks, D], VKQ_meta [rows, parallel_blocks] float2, row = (sequence * ne01 + col)
// * ne02 + head.
// Launch as ggml: template <int D> with __launch_bounds__(D, 1), one thread per channel, block D, a 3-D grid
// (ne01, ne02, ne03) whose dimensions the kernel reads back as the tensor sizes, the metas staged in dynamic
// shared memory (parallel_blocks float2), parallel_blocks a run-time argument; static kernel.
#include <cuda_runtime.h>
#include <cstdint>

#define SOFTMAX_FTZ_THRESHOLD -20.0f  // exp(-20) is flushed to 0

// Partials normal(0, 1) (unnormalized sums of values), metas uniform(1, 12): a running max of scores and a row
// sum of at least one exp(0) term. Default fp32 tolerances.
/* kerntune:
args  = ["VKQ_parts: in f32[ne03 * ne01 * ne02 * parallel_blocks * 128]",
         "VKQ_meta: in f32[ne03 * ne01 * ne02 * parallel_blocks * 2] ~ uniform(1, 12)",
         "dst: out f32[ne03 * ne01 * ne02 * 128]", "parallel_blocks: i32 = parallel_blocks"]
sizes = [{ ne01 = 1024, ne02 = 32, ne03 = 1, parallel_blocks = 4 },
         { ne01 = 1, ne02 = 32, ne03 = 4, parallel_blocks = 16 },
         { ne01 = 37, ne02 = 7, ne03 = 3, parallel_blocks = 3 }]
grid  = ["ne01", "ne02", "ne03"]
block = 128
smem  = "parallel_blocks * 8"
template_args = ["128"]
*/
template <int D>  // D == head size
__launch_bounds__(D, 1) static __global__
    void flash_attn_combine_results(const float* __restrict__ VKQ_parts, const float2* __restrict__ VKQ_meta,
                                    float* __restrict__ dst, const int parallel_blocks) {
  // threadIdx.x: the channel; blockIdx.x / y / z: query column, head, sequence (dst permuted [0, 2, 1, 3])
  const int ne01 = gridDim.x;
  const int ne02 = gridDim.y;

  const int col = blockIdx.x;
  const int head = blockIdx.y;
  const int sequence = blockIdx.z;

  const int j_dst_unrolled = (sequence * ne01 + col) * ne02 + head;

  VKQ_parts += static_cast<int64_t>(j_dst_unrolled) * parallel_blocks * D;
  VKQ_meta += static_cast<int64_t>(j_dst_unrolled) * parallel_blocks;
  dst += static_cast<int64_t>(j_dst_unrolled) * D;

  const int tid = threadIdx.x;

  extern __shared__ float2 meta[];
  for (int i = tid; i < 2 * parallel_blocks; i += D) {
    reinterpret_cast<float*>(meta)[i] = reinterpret_cast<const float*>(VKQ_meta)[i];
  }

  __syncthreads();

  float kqmax = meta[0].x;
  for (int l = 1; l < parallel_blocks; ++l) {
    kqmax = fmaxf(kqmax, meta[l].x);
  }

  float VKQ_numerator = 0.0f;
  float VKQ_denominator = 0.0f;
  for (int l = 0; l < parallel_blocks; ++l) {
    const float diff = meta[l].x - kqmax;
    float KQ_max_scale = expf(diff);
    const uint32_t ftz_mask = 0xFFFFFFFF * (diff > SOFTMAX_FTZ_THRESHOLD);
    *reinterpret_cast<uint32_t*>(&KQ_max_scale) &= ftz_mask;

    VKQ_numerator += KQ_max_scale * VKQ_parts[l * D + tid];
    VKQ_denominator += KQ_max_scale * meta[l].y;
  }

  dst[tid] = VKQ_numerator / VKQ_denominator;
}

// The combine step of ggml's launch_fattn: VKQ_parts, VKQ_meta from the split attention kernel, dst the
// attention output; device pointers.
static void flash_attn_combine_results_cuda(const float* VKQ_parts, const float2* VKQ_meta, float* dst, const int D,
                                            const int ne01, const int ne02, const int ne03,
                                            const int parallel_blocks, cudaStream_t stream) {
  const dim3 block_dim_combine(D, 1, 1);
  const dim3 blocks_num_combine(ne01, ne02, ne03);
  const size_t nbytes_shared_combine = parallel_blocks * sizeof(float2);

  switch (D) {
    case 64:
      flash_attn_combine_results<64><<<blocks_num_combine, block_dim_combine, nbytes_shared_combine, stream>>>(
          VKQ_parts, VKQ_meta, dst, parallel_blocks);
      break;
    case 128:
      flash_attn_combine_results<128><<<blocks_num_combine, block_dim_combine, nbytes_shared_combine, stream>>>(
          VKQ_parts, VKQ_meta, dst, parallel_blocks);
      break;
    case 256:
      flash_attn_combine_results<256><<<blocks_num_combine, block_dim_combine, nbytes_shared_combine, stream>>>(
          VKQ_parts, VKQ_meta, dst, parallel_blocks);
      break;
    default:
      break;  // no kernel for other head sizes
  }
}
