// Style kernel: NeoX rotary (rotate_half) over a head-major query [batch, heads, seq, dim] and the keys of a
// contiguous KV cache [batch, heads, max_seq, dim] (the new tokens at rows 0 .. seq - 1 of each head's slice), out
// of place, fp16, no cos/sin cache and no position array: position = start_pos + the token's index in its sequence,
// inv_freq = powf(base, -2i / dim) (Llama-style base), cosf / sinf in fp32, one rounding to fp16. A block per
// (batch, head, token) row, a thread per pair, a plain launch; outputs first.
#include <cuda_fp16.h>

/* kerntune:
args  = ["q_out: out f16[batch * heads * seq * dim]", "k_out: out f16[batch * heads * max_seq * dim]",
         "q: in f16[batch * heads * seq * dim]", "k_cache: in f16[batch * heads * max_seq * dim]",
         "base: f32 = 500000.0", "dim: i32 = dim", "seq: i32 = seq", "max_seq: i32 = max_seq",
         "start_pos: i32 = start_pos"]
sizes = [{ batch = 2, heads = 8, seq = 64, dim = 128, max_seq = 96, start_pos = 17 },
         { batch = 3, heads = 4, seq = 5, dim = 64, max_seq = 9, start_pos = 3 }]
grid  = "batch * heads * seq"
block = "dim / 2"
*/
__global__ void rope_bhsd_kcache_f16(__half* q_out, __half* k_out, const __half* q, const __half* k_cache,
                                     float base, int dim, int seq, int max_seq, int start_pos) {
  const int row = blockIdx.x;  // (b * heads + h) * seq + s
  const int s = row % seq;
  const int bh = row / seq;
  const int pos = start_pos + s;
  const int i = threadIdx.x;  // pair i: elements i and i + dim / 2
  const int half = dim / 2;
  const float inv_freq = powf(base, -(float)(2 * i) / (float)dim);
  const float theta = (float)pos * inv_freq;
  const float c = cosf(theta), sn = sinf(theta);
  const long long qo = (long long)row * dim;
  const long long ko = ((long long)bh * max_seq + s) * dim;
  const float q0 = __half2float(q[qo + i]), q1 = __half2float(q[qo + i + half]);
  const float k0 = __half2float(k_cache[ko + i]), k1 = __half2float(k_cache[ko + i + half]);
  q_out[qo + i] = __float2half(q0 * c - q1 * sn);
  q_out[qo + i + half] = __float2half(q1 * c + q0 * sn);
  k_out[ko + i] = __float2half(k0 * c - k1 * sn);
  k_out[ko + i + half] = __float2half(k1 * c + k0 * sn);
}

void launch_rope_bhsd_kcache_f16(__half* q_out, __half* k_out, const __half* q, const __half* k_cache, float base,
                                 int batch, int heads, int seq, int dim, int max_seq, int start_pos) {
  rope_bhsd_kcache_f16<<<batch * heads * seq, dim / 2>>>(q_out, k_out, q, k_cache, base, dim, seq, max_seq, start_pos);
}
