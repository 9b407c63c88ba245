// Rotary fp16, query only, out of place: the pairs (2i, 2i + 1) of each head multiplied by a complex number of a
// half2 table (cos, sin) per rotary pair [max_pos, S / 2]; one warp per (token, head), lanes striding the pairs.
#include <cuda_fp16.h>
/* kerntune:
args  = ["x: in f16[T * H * S]", "y: out f16[T * H * S]", "cis: in f16[2048 * S] ~ uniform(-1, 1)", "pos: in i32[T] ~ randint(0, 2047)", "heads: i32 = H", "S: i32 = S"]
sizes = [{ T = 256, H = 8, S = 128 }, { T = 7, H = 3, S = 64 }]
grid  = "T * H"
block = "32"
*/
__global__ void rope_complex(const __half* x, __half* y, const __half2* cis, const int* pos, int heads, int S) {
  const int t = blockIdx.x / heads;
  const __half2* row = cis + (size_t)pos[t] * (S / 2);
  const __half* xi = x + (size_t)blockIdx.x * S;
  __half* yo = y + (size_t)blockIdx.x * S;
  for (int i = threadIdx.x; i < S / 2; i += 32) {
    const float2 f = __half22float2(row[i]);
    const float a = __half2float(xi[2 * i]), b = __half2float(xi[2 * i + 1]);
    yo[2 * i] = __float2half(a * f.x - b * f.y);
    yo[2 * i + 1] = __float2half(a * f.y + b * f.x);
  }
}

void rope_complex_launch(const __half* x, __half* y, const __half2* cis, const int* pos, int T, int heads, int S,
                         cudaStream_t stream) {
  rope_complex<<<T * heads, 32, 0, stream>>>(x, y, cis, pos, heads, S);
}
