// Style kernel: GPT-J rotary (adjacent pairs 2i, 2i + 1) of ONE tensor, in place, bf16, [batch, seq, heads,
// head_dim] token-major: no position array and no cos/sin cache, each token's position past_len + its index in its
// sequence, inv = powf(rope_theta, -2i / head_dim), sincosf in fp32, one rounding to bf16. A flat grid-stride loop
// over the pairs (a capped grid of 256-thread blocks), the element offset a local. A run-time flag `conj` turns
// the other way (sin negated: the inverse rotation of a backward pass); the spec runs the forward one.
#include <cuda_bf16.h>
#include <stdint.h>

/* kerntune:
args  = ["x: inout bf16[batch * seq * heads * head_dim]", "n_pairs: i64 = batch * seq * heads * head_dim / 2",
         "heads: i32 = heads", "head_dim: i32 = head_dim", "seq_len: i32 = seq", "past_len: i32 = past",
         "rope_theta: f32 = 10000.0", "conj: u8 = 0"]
sizes = [{ batch = 4, seq = 1024, heads = 32, head_dim = 128, past = 16 },
         { batch = 8, seq = 1, heads = 16, head_dim = 64, past = 731 },
         { batch = 3, seq = 77, heads = 12, head_dim = 80, past = 5 }]
grid  = "min(cdiv(batch * seq * heads * head_dim / 2, 256), 4096)"
block = 256
*/
__global__ void rope_gptj_inplace_bf16(__nv_bfloat16* x, int64_t n_pairs, int heads, int head_dim, int seq_len,
                                       int past_len, float rope_theta, bool conj) {
  const int half = head_dim / 2;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n_pairs;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = idx / half;  // (b * seq_len + s) * heads + h
    const int i = (int)(idx % half);
    const int s = (int)((row / heads) % seq_len);
    const float pos = (float)(past_len + s);
    const float inv = powf(rope_theta, -2.0f * (float)i / (float)head_dim);
    float sn, cs;
    sincosf(pos * inv, &sn, &cs);
    if (conj) sn = -sn;
    const int64_t off = row * head_dim + 2 * i;
    const float a = __bfloat162float(x[off]), b = __bfloat162float(x[off + 1]);
    x[off] = __float2bfloat16(a * cs - b * sn);
    x[off + 1] = __float2bfloat16(a * sn + b * cs);
  }
}

void rope_gptj_inplace(__nv_bfloat16* x, int batch, int seq, int heads, int head_dim, int past, bool inverse,
                       cudaStream_t stream) {
  const int64_t n_pairs = (int64_t)batch * seq * heads * head_dim / 2;
  int64_t blocks = (n_pairs + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  rope_gptj_inplace_bf16<<<(unsigned)blocks, 256, 0, stream>>>(x, n_pairs, heads, head_dim, seq, past, 10000.0f,
                                                              inverse);
}
