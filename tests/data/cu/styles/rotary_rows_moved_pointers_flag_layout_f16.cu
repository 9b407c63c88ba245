// Rotary of one fp16 tensor in place (fp32 arithmetic), one block a row of one head reached by moving the pointers
// themselves, in another style than the held-out CTranslate2 kernel: a thread a NeoX pair (not an output element),
// in place, the tables first in the argument list, a start position added (the tokens already cached), partial
// rotary (rot_dim < head_dim: the rest left as it is), and an int flag choosing the layout whose spec value is 0:
// head-major [batch, heads, seq, head_dim] (row r at start_pos + r % seq_len), else time-major [seq, heads, head_dim]
// of one sequence (row r at start_pos + r / num_heads). The cos and sin tables [start_pos + seq_len, rot_dim] full
// width (each half for its element of a pair).
#include <cuda_fp16.h>
#include <cstddef>

/* kerntune:
args  = ["cos_t: in f16[(start + s) * r] ~ uniform(-1, 1)", "sin_t: in f16[(start + s) * r] ~ uniform(-1, 1)",
         "x: inout f16[b * h * s * d]", "head_dim: i32 = d", "rot_dim: i32 = r", "seq_len: i32 = s",
         "num_heads: i32 = h", "start_pos: i32 = start", "time_major: i32 = 0"]
sizes = [{ b = 2, h = 16, s = 512, d = 128, r = 64, start = 3 },
         { b = 3, h = 5, s = 37, d = 96, r = 32, start = 11 }]
grid  = "b * h * s"
block = 64
*/
__global__ void rope_rows_in_place_f16(const __half* __restrict__ cos_t, const __half* __restrict__ sin_t, __half* x,
                                       int head_dim, int rot_dim, int seq_len, int num_heads, int start_pos,
                                       int time_major) {
  const int row = blockIdx.x;
  const int t = time_major ? row / num_heads : row % seq_len;
  const int pos = start_pos + t;
  x += (size_t)row * head_dim;
  cos_t += (size_t)pos * rot_dim;
  sin_t += (size_t)pos * rot_dim;
  const int half = rot_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float a = __half2float(x[i]), b = __half2float(x[i + half]);
    x[i] = __float2half(a * __half2float(cos_t[i]) - b * __half2float(sin_t[i]));
    x[i + half] = __float2half(b * __half2float(cos_t[i + half]) + a * __half2float(sin_t[i + half]));
  }
}
