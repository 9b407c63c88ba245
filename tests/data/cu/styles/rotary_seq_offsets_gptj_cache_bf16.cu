// GPT-J rotary in bf16, in place on query and key ([tokens, heads, head_size] each, the tokens batch-major in
// sequences of seq_len), one cos_sin cache [max_pos, rot_dim] (cos half, then sin half, as vLLM's), the channels past
// rot_dim untouched; positions as one int64 offset per sequence (its KV cache length while decoding): token s of
// sequence b at seq_offsets[b] + s. A block per token (1-D grid), its threads over every (head, pair) of the token.
#include <cstdint>
#include <cuda_bf16.h>
/* kerntune:
args  = ["seq_offsets: in i64[batch] ~ randint(0, max_pos - seq_len + 1)", "seq_len: i32 = seq_len",
         "query: inout bf16[batch * seq_len * nq * hs]", "key: inout bf16[batch * seq_len * nk * hs]",
         "cos_sin: in bf16[max_pos * rot] ~ uniform(-1, 1)", "rot_dim: i32 = rot", "head_size: i32 = hs",
         "num_heads: i32 = nq", "num_kv_heads: i32 = nk"]
sizes = [{ batch = 3, seq_len = 37, nq = 8, nk = 2, hs = 128, rot = 64, max_pos = 2048 },
         { batch = 8, seq_len = 1, nq = 32, nk = 8, hs = 64, rot = 64, max_pos = 4096 }]
grid  = "batch * seq_len"
block = "128"
*/
__global__ void rope_seq_offsets_gptj(const int64_t* __restrict__ seq_offsets, int seq_len, __nv_bfloat16* query,
                                      __nv_bfloat16* key, const __nv_bfloat16* __restrict__ cos_sin, int rot_dim,
                                      int head_size, int num_heads, int num_kv_heads) {
  const int token = blockIdx.x;
  const int seq = token / seq_len;
  const int64_t pos = seq_offsets[seq] + token % seq_len;
  const __nv_bfloat16* cs = cos_sin + pos * rot_dim;
  const int half = rot_dim / 2;
  for (int i = threadIdx.x; i < (num_heads + num_kv_heads) * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    __nv_bfloat16* v = h < num_heads ? query + ((int64_t)token * num_heads + h) * head_size
                                     : key + ((int64_t)token * num_kv_heads + (h - num_heads)) * head_size;
    const float c = __bfloat162float(cs[j]), s = __bfloat162float(cs[half + j]);
    const float x = __bfloat162float(v[2 * j]), y = __bfloat162float(v[2 * j + 1]);
    v[2 * j] = __float2bfloat16(x * c - y * s);
    v[2 * j + 1] = __float2bfloat16(y * c + x * s);
  }
}

void rope_seq_offsets_gptj_launch(const int64_t* seq_offsets, int batch, int seq_len, __nv_bfloat16* query,
                                  __nv_bfloat16* key, const __nv_bfloat16* cos_sin, int rot_dim, int head_size,
                                  int num_heads, int num_kv_heads, cudaStream_t stream) {
  rope_seq_offsets_gptj<<<batch * seq_len, 128, 0, stream>>>(seq_offsets, seq_len, query, key, cos_sin, rot_dim,
                                                             head_size, num_heads, num_kv_heads);
}
