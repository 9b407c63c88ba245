// Rotary embedding in the style of Kestrel (m87-labs/kestrel, Moondream's inference engine:
// kestrel/ops/rotary_embedding/kernel.cu, rotary_embedding_neox_fp32_kernel behind rotary_embedding):
//   GPT-NeoX pairing only (x[i] with x[i + rot_dim / 2]), bf16 only, IN PLACE on query and key
//   positions: int64 [B, S] (contiguous, flattened to B * S tokens); query [B, S, num_heads, head_size] and key
//   [B, S, num_kv_heads, head_size] contiguous bf16; cos_sin_cache FP32 [max_pos, rot_dim] in vLLM's layout (the
//   rot_dim / 2 cosines, then the rot_dim / 2 sines of a position); rot_dim % 4 == 0 and rot_dim <= head_size (the
//   head tail past rot_dim is left untouched)
//   math in fp32 with explicitly rounded __fmul_rn / __fsub_rn / __fadd_rn (no fma contraction, "match the training
//   code"), ONE rounding to bf16 per output element (__float2bfloat16_rn)
//   launch: one block per token; each thread takes TWO adjacent rotary offsets (rot0, rot0 + 1) of one head index
//   and applies them to the query head and, when the head index is below num_kv_heads, to the key head (the loop
//   runs over max(num_heads, num_kv_heads) * rot_dim / 4 items); cos/sin read through a KESTREL_LDG macro (__ldg);
//   threads = the next power of two >= that work, at least 32, capped at 256; namespace kestrel::pos_encoding
// Kestrel's host picks among three kernels by token count (this one, a one-offset-per-thread kernel for mid-size
// prefill, and a split-heads 2-D grid for decode); only the two-offsets-per-thread kernel is kept here, launched
// for every size. The torch::Tensor checks and PYBIND11 module are replaced by device pointers, sizes and a stream.
// No bug found.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace kestrel {
namespace pos_encoding {

#if defined(__CUDA_ARCH__)
#define KESTREL_LDG(arg) __ldg(arg)
#else
#define KESTREL_LDG(arg) *(arg)
#endif

__device__ __forceinline__ void apply_rotary_neox_fp32(__nv_bfloat16* __restrict__ vec, const int rot_offset,
                                                       const int embed_dim, const float cos, const float sin) {
  const int x_index = rot_offset;
  const int y_index = embed_dim + rot_offset;

  const float x = __bfloat162float(vec[x_index]);
  const float y = __bfloat162float(vec[y_index]);

  // fp32 products and sums, each rounded on its own, then one cast to bf16
  const float out_x = __fsub_rn(__fmul_rn(x, cos), __fmul_rn(y, sin));
  const float out_y = __fadd_rn(__fmul_rn(y, cos), __fmul_rn(x, sin));

  vec[x_index] = __float2bfloat16_rn(out_x);
  vec[y_index] = __float2bfloat16_rn(out_y);
}

/* kerntune:
args  = ["positions: in i64[B * S] ~ randint(0, 4096)", "query: inout bf16[B * S * H * D]",
         "key: inout bf16[B * S * KVH * D]", "cos_sin_cache: in f32[4096 * R] ~ uniform(-1, 1)",
         "num_heads: i32 = H", "num_kv_heads: i32 = KVH", "head_size: i32 = D", "rot_dim: i32 = R"]
sizes = [{ B = 16, S = 512, H = 32, KVH = 8, D = 128, R = 128 }, { B = 4, S = 1, H = 32, KVH = 8, D = 128, R = 128 },
         { B = 3, S = 333, H = 9, KVH = 3, D = 96, R = 64 }]
grid  = "B * S"
block = 256
*/
__global__ void rotary_embedding_neox_fp32_kernel(const int64_t* __restrict__ positions,
                                                  __nv_bfloat16* __restrict__ query,
                                                  __nv_bfloat16* __restrict__ key,
                                                  const float* __restrict__ cos_sin_cache, const int num_heads,
                                                  const int num_kv_heads, const int head_size, const int rot_dim) {
  const int token_idx = blockIdx.x;
  const int64_t pos = positions[token_idx];

  const int embed_dim = rot_dim / 2;
  const int embed_dim2 = embed_dim / 2;

  const float* __restrict__ cache_ptr = cos_sin_cache + pos * rot_dim;
  const float* __restrict__ cos_ptr = cache_ptr;
  const float* __restrict__ sin_ptr = cache_ptr + embed_dim;

  const int query_hidden_size = num_heads * head_size;
  const int key_hidden_size = num_kv_heads * head_size;
  __nv_bfloat16* __restrict__ q_token = query + (int64_t)token_idx * query_hidden_size;
  __nv_bfloat16* __restrict__ k_token = key + (int64_t)token_idx * key_hidden_size;

  const int max_heads = num_heads > num_kv_heads ? num_heads : num_kv_heads;
  const int max_n2 = max_heads * embed_dim2;

  for (int i = threadIdx.x; i < max_n2; i += blockDim.x) {
    const int head_idx = i / embed_dim2;
    const int offset2 = i - head_idx * embed_dim2;
    const int rot0 = offset2 * 2;
    const int rot1 = rot0 + 1;

    // one cos/sin pair per offset, shared by the query and the key head
    const float cos0 = KESTREL_LDG(&cos_ptr[rot0]);
    const float sin0 = KESTREL_LDG(&sin_ptr[rot0]);
    const float cos1 = KESTREL_LDG(&cos_ptr[rot1]);
    const float sin1 = KESTREL_LDG(&sin_ptr[rot1]);

    if (head_idx < num_heads) {
      __nv_bfloat16* __restrict__ q_head = q_token + head_idx * head_size;
      apply_rotary_neox_fp32(q_head, rot0, embed_dim, cos0, sin0);
      apply_rotary_neox_fp32(q_head, rot1, embed_dim, cos1, sin1);
    }
    if (head_idx < num_kv_heads) {
      __nv_bfloat16* __restrict__ k_head = k_token + head_idx * head_size;
      apply_rotary_neox_fp32(k_head, rot0, embed_dim, cos0, sin0);
      apply_rotary_neox_fp32(k_head, rot1, embed_dim, cos1, sin1);
    }
  }
}

// positions: device [batch, seq_len] int64; query: [batch, seq_len, num_heads, head_size] bf16, in place;
// key: [batch, seq_len, num_kv_heads, head_size] bf16, in place; cos_sin_cache: [max_pos, rot_dim] fp32.
void rotary_embedding(const int64_t* positions, __nv_bfloat16* query, __nv_bfloat16* key,
                      const float* cos_sin_cache, int64_t batch, int64_t seq_len, int num_heads, int num_kv_heads,
                      int head_size, int rot_dim, cudaStream_t stream) {
  const int64_t num_tokens = batch * seq_len;
  if (num_tokens == 0) {
    return;
  }
  const int embed_dim = rot_dim / 2;
  const int embed_dim2 = embed_dim / 2;
  const int max_heads = num_heads > num_kv_heads ? num_heads : num_kv_heads;
  const int work_pair = max_heads * embed_dim2;

  int threads = 32;
  while (threads < work_pair) {
    threads <<= 1;
  }
  threads = std::min(threads, 256);

  dim3 grid(static_cast<unsigned int>(num_tokens));
  rotary_embedding_neox_fp32_kernel<<<grid, threads, 0, stream>>>(positions, query, key, cos_sin_cache, num_heads,
                                                                  num_kv_heads, head_size, rot_dim);
}

}  // namespace pos_encoding
}  // namespace kestrel
