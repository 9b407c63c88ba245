// GPT-J (interleaved) rotary in place, fp16 with fp32 arithmetic, over one tensor laid out [batch, seq, heads,
// head_dim] with no position ids: row (b, s, h) is at position start_pos + s (the tokens already in the KV cache),
// cos and sin tables [start_pos + seq, head_dim / 2] (candle's rope_i over the rope_thd layout; FlashAttention's
// apply_rotary with an int seqlen_offsets). A grid-stride loop over the pairs, 256 threads a block; the pair's
// position is derived from the flat index and the size arguments, the two elements through a local pointer.
#include <cuda_fp16.h>

/* kerntune:
args  = ["x: inout f16[batch * seq * heads * head_dim]",
         "cos_tab: in f16[(seq + start) * head_dim / 2] ~ uniform(-1, 1)",
         "sin_tab: in f16[(seq + start) * head_dim / 2] ~ uniform(-1, 1)",
         "batch: i32 = batch", "seq_len: i32 = seq", "n_heads: i32 = heads", "head_dim: i32 = head_dim",
         "start_pos: i32 = start"]
sizes = [{ batch = 2, seq = 512, heads = 8, head_dim = 128, start = 7 },
         { batch = 3, seq = 5, heads = 4, head_dim = 64, start = 100 }]
grid  = "min(cdiv(batch * seq * heads * head_dim / 2, 256), 4096)"
block = "256"
*/
__global__ void rope_interleaved_bthd(__half* __restrict__ x, const __half* __restrict__ cos_tab,
                                      const __half* __restrict__ sin_tab, int batch, int seq_len, int n_heads,
                                      int head_dim, int start_pos) {
  const int half_dim = head_dim / 2;
  const long long total = (long long)batch * seq_len * n_heads * half_dim;
  for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < total;
       p += (long long)gridDim.x * blockDim.x) {
    const int i = p % half_dim;
    const long long row = p / half_dim;  // (b, s, h)
    const int s = (row / n_heads) % seq_len;
    const int pos = start_pos + s;
    const float c = __half2float(cos_tab[pos * half_dim + i]);
    const float sn = __half2float(sin_tab[pos * half_dim + i]);
    __half* v = x + row * head_dim + 2 * i;
    const float x0 = __half2float(v[0]), x1 = __half2float(v[1]);
    v[0] = __float2half(x0 * c - x1 * sn);
    v[1] = __float2half(x0 * sn + x1 * c);
  }
}
