// Style kernel: rotary embedding of a prompt's chunk, q [T, n_heads * head_dim] and k [T, n_kv_heads * head_dim]
// fp16 in place, NeoX halves (d and d + head_dim / 2), the angles computed in fp32 from a base the file fixes
// (#define ROPE_BASE 500000.0f, Llama 3's) and the position start_pos + t: one block a token, a thread a pair of
// one head, q's heads first, then k's in a loop of their own. No position buffer, no cos/sin table, and no
// argument holds the token count (the grid does).
#include <cuda_fp16.h>

#define ROPE_BASE 500000.0f

/* kerntune:
args  = ["q: inout f16[T * n_heads * head_dim]", "k: inout f16[T * n_kv_heads * head_dim]", "start_pos: i32 = 17",
         "n_heads: i32 = n_heads", "n_kv_heads: i32 = n_kv_heads", "head_dim: i32 = head_dim"]
sizes = [{ T = 512, n_heads = 32, n_kv_heads = 8, head_dim = 128 }, { T = 3, n_heads = 8, n_kv_heads = 8, head_dim = 64 }]
grid  = "T"
block = 256
*/
__global__ void rope_prompt_chunk(__half* q, __half* k, int start_pos, int n_heads, int n_kv_heads, int head_dim) {
  const int t = blockIdx.x;
  const int half_dim = head_dim / 2;
  const float pos = (float)(start_pos + t);
  for (int j = threadIdx.x; j < n_heads * half_dim; j += blockDim.x) {
    const int h = j / half_dim, d = j % half_dim;
    const float inv_freq = powf(ROPE_BASE, -2.0f * d / head_dim);
    float s, c;
    sincosf(pos * inv_freq, &s, &c);
    __half* row = q + ((size_t)t * n_heads + h) * head_dim;
    const float a = __half2float(row[d]), b = __half2float(row[d + half_dim]);
    row[d] = __float2half(a * c - b * s);
    row[d + half_dim] = __float2half(b * c + a * s);
  }
  for (int j = threadIdx.x; j < n_kv_heads * half_dim; j += blockDim.x) {
    const int h = j / half_dim, d = j % half_dim;
    const float inv_freq = powf(ROPE_BASE, -2.0f * d / head_dim);
    float s, c;
    sincosf(pos * inv_freq, &s, &c);
    __half* row = k + ((size_t)t * n_kv_heads + h) * head_dim;
    const float a = __half2float(row[d]), b = __half2float(row[d + half_dim]);
    row[d] = __float2half(a * c - b * s);
    row[d + half_dim] = __float2half(b * c + a * s);
  }
}

void rope_prompt(__half* q, __half* k, int T, int start_pos, int n_heads, int n_kv_heads, int head_dim,
                 cudaStream_t stream) {
  rope_prompt_chunk<<<T, 256, 0, stream>>>(q, k, start_pos, n_heads, n_kv_heads, head_dim);
}
