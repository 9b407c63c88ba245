// Megatron-style rotary (GPT-NeoX rotate_half) in place over one fp16 tensor in Megatron's SBHD layout [seq, batch,
// heads, head_dim] (contiguous), from fp32 ANGLES rather than a cos/sin cache: freqs [seq, head_dim / 2], one angle a
// pair (the outer product of positions 0..seq-1 with inv_freq), its cosine and sine taken by cosf and sinf where each
// pair is rotated. No positions: block (s, b) of a 1-D grid of seq * batch blocks is position s. The threads stride
// the (head, pair) range of the block's heads.
#include <cuda_fp16.h>

/* kerntune:
args  = ["x: inout f16[seq * batch * heads * hd]", "freqs: in f32[seq * hd / 2] ~ uniform(0, 50)",
         "seq_len: i32 = seq", "batch: i32 = batch", "heads: i32 = heads", "head_dim: i32 = hd"]
sizes = [{ seq = 2048, batch = 2, heads = 16, hd = 128 }, { seq = 3, batch = 5, heads = 12, hd = 64 }]
grid  = "seq * batch"
block = "128"
*/
__global__ void rope_sbhd_angles_in_place(__half* __restrict__ x, const float* __restrict__ freqs, int seq_len,
                                          int batch, int heads, int head_dim) {
  const int s = blockIdx.x / batch;
  const int b = blockIdx.x % batch;
  const int half = head_dim / 2;
  __half* row = x + (long long)s * batch * heads * head_dim + (long long)b * heads * head_dim;
  for (int j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    const float a = freqs[s * half + i];
    const float c = cosf(a), sn = sinf(a);
    __half* v = row + h * head_dim;
    const float x0 = __half2float(v[i]), x1 = __half2float(v[i + half]);
    v[i] = __float2half(x0 * c - x1 * sn);
    v[i + half] = __float2half(x1 * c + x0 * sn);
  }
}
