// NeoX rotary in place over a batch of new tokens x [batch, seq, heads, head_dim] (fp16), in ExLlamaV2's convention:
// the SIN table before the COS table, both fp16 [max_pos, head_dim] as Hugging Face builds them (cat(freqs, freqs):
// only the first head_dim / 2 columns are read), and each sequence's position offset past_lens[b] (int32, the tokens
// already in its cache): token s of sequence b is at position past_lens[b] + s. fp32 math, one rounding. A block of
// (32, 4) threads per (batch, token): threadIdx.y strides the heads, threadIdx.x the pairs.
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["x: inout f16[batch * seq * heads * hd]", "sin: in f16[4096 * hd] ~ uniform(-1, 1)",
         "cos: in f16[4096 * hd] ~ uniform(-1, 1)", "past_lens: in i32[batch] ~ randint(0, 4096 - seq)",
         "seq_len: i32 = seq", "num_heads: i32 = heads", "head_dim: i32 = hd"]
sizes = [{ batch = 4, seq = 256, heads = 32, hd = 128 }, { batch = 3, seq = 5, heads = 7, hd = 64 }]
grid  = ["seq", "batch"]
block = ["32", "4"]
*/
__global__ void rope_past_lens(__half* __restrict__ x, const __half* __restrict__ sin, const __half* __restrict__ cos,
                               const int32_t* __restrict__ past_lens, int seq_len, int num_heads, int head_dim) {
  const int s = blockIdx.x, b = blockIdx.y;
  const int pos = past_lens[b] + s;
  const int half_dim = head_dim / 2;
  __half* row = x + ((size_t)b * seq_len + s) * num_heads * head_dim;
  const __half* sr = sin + (size_t)pos * head_dim;
  const __half* cr = cos + (size_t)pos * head_dim;
  for (int h = threadIdx.y; h < num_heads; h += blockDim.y) {
    __half* xh = row + (size_t)h * head_dim;
    for (int i = threadIdx.x; i < half_dim; i += blockDim.x) {
      const float c = __half2float(cr[i]), sn = __half2float(sr[i]);
      const float x0 = __half2float(xh[i]), x1 = __half2float(xh[i + half_dim]);
      xh[i] = __float2half(x0 * c - x1 * sn);
      xh[i + half_dim] = __float2half(x1 * c + x0 * sn);
    }
  }
}

void rope_past_lens_launch(__half* x, const __half* sin, const __half* cos, const int32_t* past_lens, int batch,
                           int seq_len, int num_heads, int head_dim, cudaStream_t stream) {
  rope_past_lens<<<dim3(seq_len, batch), dim3(32, 4), 0, stream>>>(x, sin, cos, past_lens, seq_len, num_heads,
                                                                   head_dim);
}
