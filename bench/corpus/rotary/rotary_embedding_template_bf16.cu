// Rotary embedding (bf16, in place) in the style of vLLM's csrc/pos_encoding_kernels.cu: a kernel template over the
// element type and IS_NEOX (the host launches the NeoX or the GPT-J instantiation from a runtime flag), int64
// positions, one cos_sin_cache [max_position, rot_dim] with cos in the first half and sin in the second, query and
// key row strides, one token per block, block = min(num_heads * rot_dim / 2, 512). The rotation is computed in the
// storage type (operator* and operator- on __nv_bfloat16). The spec below describes the NeoX launch.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

namespace pos_enc {

template <typename scalar_t, bool IS_NEOX>
inline __device__ void apply_token_rotary_embedding(scalar_t* __restrict__ arr, const scalar_t* __restrict__ cos_ptr,
                                                    const scalar_t* __restrict__ sin_ptr, int rot_offset,
                                                    int embed_dim) {
  int x_index, y_index;
  scalar_t cos, sin;
  if (IS_NEOX) {
    // GPT-NeoX style rotary embedding.
    x_index = rot_offset;
    y_index = embed_dim + rot_offset;
    cos = cos_ptr[x_index];
    sin = sin_ptr[x_index];
  } else {
    // GPT-J style rotary embedding.
    x_index = 2 * rot_offset;
    y_index = 2 * rot_offset + 1;
    cos = cos_ptr[x_index / 2];
    sin = sin_ptr[x_index / 2];
  }
  const scalar_t x = arr[x_index];
  const scalar_t y = arr[y_index];
  arr[x_index] = x * cos - y * sin;
  arr[y_index] = y * cos + x * sin;
}

/* kerntune:
args  = ["positions: in i64[num_tokens] ~ randint(0, 4096)", "query: inout bf16[num_tokens * num_heads * head_size]",
         "key: inout bf16[num_tokens * num_kv_heads * head_size]",
         "cos_sin_cache: in bf16[4096 * rot_dim] ~ uniform(-1, 1)", "rot_dim: i32 = rot_dim",
         "query_stride: i64 = num_heads * head_size", "key_stride: i64 = num_kv_heads * head_size",
         "num_heads: i32 = num_heads", "num_kv_heads: i32 = num_kv_heads", "head_size: i32 = head_size"]
sizes = [{ num_tokens = 8192, num_heads = 32, num_kv_heads = 8, head_size = 128, rot_dim = 128 },
         { num_tokens = 32, num_heads = 32, num_kv_heads = 8, head_size = 128, rot_dim = 128 },
         { num_tokens = 1001, num_heads = 28, num_kv_heads = 4, head_size = 128, rot_dim = 64 }]
grid  = "num_tokens"
block = "min(num_heads * rot_dim / 2, 512)"
template_args = ["__nv_bfloat16", "true"]
*/
template <typename scalar_t, bool IS_NEOX>
__global__ void rotary_embedding_kernel(
    const int64_t* __restrict__ positions,       // [num_tokens]
    scalar_t* __restrict__ query,                // [num_tokens, num_heads, head_size]
    scalar_t* __restrict__ key,                  // [num_tokens, num_kv_heads, head_size]
    const scalar_t* __restrict__ cos_sin_cache,  // [max_position, 2, rot_dim // 2]
    const int rot_dim, const int64_t query_stride, const int64_t key_stride, const int num_heads,
    const int num_kv_heads, const int head_size) {
  // Each thread block is responsible for one token.
  const int token_idx = blockIdx.x;
  const int64_t pos = positions[token_idx];
  const scalar_t* cache_ptr = cos_sin_cache + pos * rot_dim;

  const int embed_dim = rot_dim / 2;
  const scalar_t* cos_ptr = cache_ptr;
  const scalar_t* sin_ptr = cache_ptr + embed_dim;

  const int nq = num_heads * embed_dim;
  for (int i = threadIdx.x; i < nq; i += blockDim.x) {
    const int head_idx = i / embed_dim;
    const int64_t token_head = token_idx * query_stride + head_idx * head_size;
    const int rot_offset = i % embed_dim;
    apply_token_rotary_embedding<scalar_t, IS_NEOX>(query + token_head, cos_ptr, sin_ptr, rot_offset, embed_dim);
  }

  const int nk = num_kv_heads * embed_dim;
  for (int i = threadIdx.x; i < nk; i += blockDim.x) {
    const int head_idx = i / embed_dim;
    const int64_t token_head = token_idx * key_stride + head_idx * head_size;
    const int rot_offset = i % embed_dim;
    apply_token_rotary_embedding<scalar_t, IS_NEOX>(key + token_head, cos_ptr, sin_ptr, rot_offset, embed_dim);
  }
}

}  // namespace pos_enc

void rotary_embedding(const int64_t* positions, __nv_bfloat16* query, __nv_bfloat16* key, int head_size,
                      const __nv_bfloat16* cos_sin_cache, bool is_neox, int num_tokens, int num_heads,
                      int num_kv_heads, int rot_dim, cudaStream_t stream) {
  const int64_t query_stride = (int64_t)num_heads * head_size;
  const int64_t key_stride = (int64_t)num_kv_heads * head_size;
  dim3 grid(num_tokens);
  dim3 block(std::min(num_heads * rot_dim / 2, 512));
  if (is_neox) {
    pos_enc::rotary_embedding_kernel<__nv_bfloat16, true><<<grid, block, 0, stream>>>(
        positions, query, key, cos_sin_cache, rot_dim, query_stride, key_stride, num_heads, num_kv_heads, head_size);
  } else {
    pos_enc::rotary_embedding_kernel<__nv_bfloat16, false><<<grid, block, 0, stream>>>(
        positions, query, key, cos_sin_cache, rot_dim, query_stride, key_stride, num_heads, num_kv_heads, head_size);
  }
}
