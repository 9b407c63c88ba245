// NeoX rotary embedding as DeepSpeed's inference kernels apply it (csrc/transformer/inference,
// apply_rotary_pos_emb.cu, apply_rotary_pos_half), in place on the query and on the key already in the KV cache:
//   mixed_query [batch * num_heads, seq_len, head_size]  (head-major, one row per (batch, head, token))
//   key_layer   [batch * num_heads, max_out_tokens, head_size]  (the cache: a head's rows max_out_tokens apart;
//               the new tokens' keys at rows 0 .. seq_len - 1 of each head's slice)
//   position    = seq_offset + token                    (contiguous positions after seq_offset cached tokens)
// No cos/sin cache: for channel n < rotary_dim, theta = 1.0 / powf(rope_theta, ((n % half_dim) * 2) / rotary_dim)
// * position, with the reciprocal taken in DOUBLE (1.0 is a double literal) before narrowing to float, then
// cosf / sinf of it; x' = x * cos(theta) + partner * sin(theta) with partner = -x[n + half] for the first half
// and +x[n - half] for the second (rotate_half), the partner fetched from another lane of the head's thread tile
// by a shuffle (cg::thread_block_tile<threadsPerHead>::shfl); channels rotary_dim .. head_size pass through
// (partial rotary, GPT-NeoX / Phi style). fp32 math, one rounding per element.
// DeepSpeed's shape: template <T, threadsPerHead, granularity>, each thread holding one 16-byte chunk
// (T_per_thread = 8 bf16) of a head, threadsPerHead = next_pow2(head_size) / 8 threads per head, a fixed block of
// rot_half::threads = 256 threads (heads_per_block = 256 / threadsPerHead heads), a flat grid over
// total_count = batch * num_heads * seq_len heads. Requires half_dim % 8 == 0 for the 16-byte granularity.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cstdint>

namespace cg = cooperative_groups;

namespace rot_half {
constexpr int threads = 256;
}  // namespace rot_half

namespace mem_access {
template <int AccessSize>
__device__ __forceinline__ void load_global(void* dst, const void* src) {
  static_assert(AccessSize == 16, "16-byte accesses only");
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}
template <int AccessSize>
__device__ __forceinline__ void store_global(void* dst, const void* src) {
  static_assert(AccessSize == 16, "16-byte accesses only");
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}
}  // namespace mem_access

/* kerntune:
args  = ["mixed_query: inout bf16[batch * num_heads * seq_len * head_size]",
         "key_layer: inout bf16[batch * num_heads * max_out_tokens * head_size]",
         "rotary_dim: u32 = rotary_dim", "seq_len: u32 = seq_len", "seq_offset: u32 = seq_offset",
         "num_heads: u32 = num_heads", "head_size: u32 = head_size",
         "total_count: u32 = batch * num_heads * seq_len", "rope_theta: f32 = 10000.0",
         "max_out_tokens: i32 = max_out_tokens"]
sizes = [{ batch = 4, num_heads = 32, seq_len = 2048, head_size = 128, rotary_dim = 128, seq_offset = 1024, max_out_tokens = 2048 },
         { batch = 8, num_heads = 32, seq_len = 1, head_size = 128, rotary_dim = 64, seq_offset = 1500, max_out_tokens = 256 },
         { batch = 3, num_heads = 5, seq_len = 37, head_size = 80, rotary_dim = 32, seq_offset = 11, max_out_tokens = 41 }]
grid  = "cdiv(batch * num_heads * seq_len, 16)"
block = 256
bytes = "batch * num_heads * seq_len * head_size * 2 * 4"
template_args = ["__nv_bfloat16", "16", "16"]
*/
template <typename T, int threadsPerHead, int granularity>
__global__ void apply_rotary_pos_half(T* mixed_query, T* key_layer, unsigned rotary_dim, unsigned seq_len,
                                      unsigned seq_offset, unsigned num_heads, unsigned head_size,
                                      unsigned total_count, float rope_theta, int max_out_tokens) {
  constexpr int T_per_thread = granularity / sizeof(T);
  constexpr int heads_per_block = rot_half::threads / threadsPerHead;

  cg::thread_block tb = cg::this_thread_block();
  cg::thread_block_tile<threadsPerHead> head_group = cg::tiled_partition<threadsPerHead>(tb);

  const int head_idx = blockIdx.x * heads_per_block + threadIdx.x / threadsPerHead;
  const int cur_seq_idx = head_idx % seq_len;
  const int64_t offset = static_cast<int64_t>(head_idx) * head_size;
  const int64_t k_offset =
      (cur_seq_idx + static_cast<int64_t>(head_idx / seq_len) * max_out_tokens) * head_size;

  const int seq_idx = cur_seq_idx + seq_offset;
  const int half_dim = rotary_dim >> 1;
  const int half_dim_threads = half_dim / T_per_thread;

  if (head_idx < total_count) {  // whole tiles agree: a tile is one head
    const int base_neuron_idx = head_group.thread_rank() * T_per_thread;
    const bool in_head = base_neuron_idx < head_size;

    alignas(16) T q[T_per_thread];
    alignas(16) T k[T_per_thread];
    if (in_head) {
      mem_access::load_global<granularity>(q, mixed_query + offset + base_neuron_idx);
      mem_access::load_global<granularity>(k, key_layer + k_offset + base_neuron_idx);
    }

#pragma unroll
    for (int i = 0; i < T_per_thread; i++) {
      const int neuron_idx = base_neuron_idx + i;

      float inv_freq = (float)((neuron_idx % half_dim) * 2) / (float)rotary_dim;
      inv_freq = 1.0 / powf(rope_theta, inv_freq) * (float)seq_idx;

      const float rotary_sign = (neuron_idx > (half_dim - 1) ? -1.0f : 1.0f);
      const float q_rot = in_head ? static_cast<float>(q[i]) * rotary_sign : 0.0f;
      const float k_rot = in_head ? static_cast<float>(k[i]) * rotary_sign : 0.0f;

      // every lane of the tile takes part in the shuffles; lanes past the rotary part ask for themselves
      int target_lane = head_group.thread_rank();
      if (neuron_idx < rotary_dim) {
        target_lane = (neuron_idx < half_dim) ? head_group.thread_rank() + half_dim_threads
                                              : head_group.thread_rank() - half_dim_threads;
      }
      const float q_rot_temp = head_group.shfl(q_rot, target_lane);
      const float k_rot_temp = head_group.shfl(k_rot, target_lane);

      if (in_head && neuron_idx < rotary_dim) {
        q[i] = static_cast<T>(static_cast<float>(q[i]) * cosf(inv_freq) + q_rot_temp * sinf(inv_freq));
        k[i] = static_cast<T>(static_cast<float>(k[i]) * cosf(inv_freq) + k_rot_temp * sinf(inv_freq));
      }
    }

    if (in_head) {
      mem_access::store_global<granularity>(mixed_query + offset + base_neuron_idx, q);
      mem_access::store_global<granularity>(key_layer + k_offset + base_neuron_idx, k);
    }
  }
}

inline int next_pow2(const int val) {
  int rounded_val = val - 1;
  rounded_val |= rounded_val >> 1;
  rounded_val |= rounded_val >> 2;
  rounded_val |= rounded_val >> 4;
  rounded_val |= rounded_val >> 8;
  rounded_val |= rounded_val >> 16;
  return rounded_val + 1;
}

#define LAUNCH_ROT_POS_EMB_HALF(HEAD_THREADS, ALIGNMENT)                                                         \
  apply_rotary_pos_half<T, HEAD_THREADS, ALIGNMENT><<<grid, block, 0, stream>>>(                                \
      mixed_query, key_layer, rotary_dim, seq_len, offset, num_heads, head_size, total_count, rope_theta,       \
      max_out_tokens);

// Device pointers; head_size <= 32 * 8, half of rotary_dim a multiple of 8 (16-byte granularity).
template <typename T>
void launch_apply_rotary_pos_emb(T* mixed_query, T* key_layer, unsigned head_size, unsigned seq_len,
                                 unsigned rotary_dim, unsigned offset, unsigned num_heads, unsigned batch,
                                 float rope_theta, cudaStream_t stream, int max_out_tokens) {
  constexpr int alignment = 16;
  constexpr int T_per_elem = alignment / sizeof(T);
  const int half_dim = rotary_dim >> 1;
  if (half_dim % T_per_elem != 0) return;  // the 8- and 4-byte granularities are not part of this file

  const unsigned total_count = batch * num_heads * seq_len;
  if (total_count == 0) return;

  const int padded_head_size = next_pow2(head_size);
  const int threads_per_head = padded_head_size / T_per_elem;
  const int heads_per_block = rot_half::threads / threads_per_head;

  dim3 block(rot_half::threads);
  dim3 grid((total_count + heads_per_block - 1) / heads_per_block);

  if (threads_per_head == 4) {
    LAUNCH_ROT_POS_EMB_HALF(4, alignment);
  } else if (threads_per_head == 8) {
    LAUNCH_ROT_POS_EMB_HALF(8, alignment);
  } else if (threads_per_head == 16) {
    LAUNCH_ROT_POS_EMB_HALF(16, alignment);
  } else if (threads_per_head == 32) {
    LAUNCH_ROT_POS_EMB_HALF(32, alignment);
  }
}

template void launch_apply_rotary_pos_emb<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, unsigned, unsigned,
                                                         unsigned, unsigned, unsigned, unsigned, float,
                                                         cudaStream_t, int);
