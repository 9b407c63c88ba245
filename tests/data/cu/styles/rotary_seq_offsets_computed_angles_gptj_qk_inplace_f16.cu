// Style kernel: GPT-J rotary (pairs 2i, 2i + 1) of query and key heads in place, fp16, token-major [batch * seq,
// heads, head_dim] with fewer key heads than query heads; no cos/sin cache: each sequence's start position an int64
// offset (its KV cache length), token s of sequence b at start_pos[b] + s, the inverse frequency powf(theta, -2i /
// head_dim) and sincosf in fp32. A block per token (blockIdx.x = b * seq + s), its threads over (head, pair).
#include <cuda_fp16.h>
#include <stdint.h>

/* kerntune:
args  = ["q: inout f16[batch * seq * n_q * head_dim]", "k: inout f16[batch * seq * n_kv * head_dim]",
         "start_pos: in i64[batch] ~ randint(0, 8192)", "seq: i32 = seq", "n_q: i32 = n_q", "n_kv: i32 = n_kv",
         "head_dim: i32 = head_dim", "theta: f32 = 500000.0"]
sizes = [{ batch = 2, seq = 2048, n_q = 32, n_kv = 8, head_dim = 128 },
         { batch = 16, seq = 1, n_q = 32, n_kv = 8, head_dim = 128 },
         { batch = 3, seq = 45, n_q = 12, n_kv = 4, head_dim = 64 }]
grid  = "batch * seq"
block = 256
*/
__global__ void rope_gptj_seq_offsets(__half* q, __half* k, const int64_t* start_pos, int seq, int n_q, int n_kv,
                                      int head_dim, float theta) {
  const int token = blockIdx.x;
  const int b = token / seq, s = token % seq;
  const float pos = (float)(start_pos[b] + s);
  const int pairs = head_dim / 2;
  for (int w = threadIdx.x; w < (n_q + n_kv) * pairs; w += blockDim.x) {
    const int head = w / pairs, i = w % pairs;
    float sn, cs;
    sincosf(pos * powf(theta, -2.0f * (float)i / (float)head_dim), &sn, &cs);
    __half* row = head < n_q ? q + ((long long)token * n_q + head) * head_dim
                             : k + ((long long)token * n_kv + (head - n_q)) * head_dim;
    const float x0 = __half2float(row[2 * i]), x1 = __half2float(row[2 * i + 1]);
    row[2 * i] = __float2half(x0 * cs - x1 * sn);
    row[2 * i + 1] = __float2half(x1 * cs + x0 * sn);
  }
}

void rope_gptj_seq_offsets_launch(__half* q, __half* k, const int64_t* start_pos, int batch, int seq, int n_q,
                                  int n_kv, int head_dim, cudaStream_t stream) {
  rope_gptj_seq_offsets<<<batch * seq, 256, 0, stream>>>(q, k, start_pos, seq, n_q, n_kv, head_dim, 500000.0f);
}
