// RMSNorm of each head (QK norm) fp16 in place, the head size a #define, a warp per head over rows = tokens * heads.
#include <cuda_fp16.h>
#define HEAD 64
/* kerntune:
args  = ["qk: inout f16[rows * 64]", "g: in f16[64]", "rows: i32 = rows"]
sizes = [{ rows = 4096 }, { rows = 21 }]
grid  = "cdiv(rows, 8)"
block = "256"
*/
__global__ void head_rmsnorm(__half* qk, const __half* g, int rows) {
  const int r = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows) return;
  __half* row = qk + (size_t)r * HEAD;
  float a = __half2float(row[lane]), b = __half2float(row[lane + 32]);
  float ss = a * a + b * b;
  for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / HEAD + 1e-6f);
  row[lane] = __float2half(a * inv * __half2float(g[lane]));
  row[lane + 32] = __float2half(b * inv * __half2float(g[lane + 32]));
}

void head_rmsnorm_launch(__half* qk, const __half* g, int rows, cudaStream_t stream) {
  head_rmsnorm<<<(rows + 7) / 8, 256, 0, stream>>>(qk, g, rows);
}
