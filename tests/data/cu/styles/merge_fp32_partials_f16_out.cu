// Merge of two fp32 partial attention outputs into an fp16 output (split-KV combine), natural-log lse [heads, T],
// one element per thread over a flat index, no output lse.
#include <cuda_fp16.h>
/* kerntune:
args  = ["out: out f16[T * H * D]", "va: in f32[T * H * D]", "la: in f32[H * T] ~ uniform(-4, 12)", "vb: in f32[T * H * D]", "lb: in f32[H * T] ~ uniform(-4, 12)", "T: i32 = T", "H: i32 = H", "D: i32 = D"]
sizes = [{ T = 64, H = 8, D = 128 }, { T = 5, H = 3, D = 64 }]
grid  = "cdiv(T * H * D, 256)"
block = "256"
*/
__global__ void combine_f16(__half* out, const float* va, const float* la, const float* vb, const float* lb, int T, int H,
                            int D) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)T * H * D) return;
  const int t = (int)(i / ((long long)H * D)), h = (int)(i / D % H);
  const float a = la[h * T + t], b = lb[h * T + t], m = fmaxf(a, b);
  const float wa = expf(a - m), wb = expf(b - m);
  out[i] = __float2half((va[i] * wa + vb[i] * wb) / (wa + wb));
}

void combine_f16_launch(__half* out, const float* va, const float* la, const float* vb, const float* lb, int T, int H,
                        int D, cudaStream_t stream) {
  combine_f16<<<(T * H * D + 255) / 256, 256, 0, stream>>>(out, va, la, vb, lb, T, H, D);
}
