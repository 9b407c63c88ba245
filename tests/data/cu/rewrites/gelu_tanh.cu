// GELU (tanh approximation), one element per thread with an early return.
#include <math.h>
/* kerntune:
args  = ["y: out f32[n]", "x: in f32[n]", "n: i32 = n"]
sizes = [{ n = 16777216 }, { n = 1000003 }]
grid  = "cdiv(n, 128)"
block = "128"
*/
__global__ void gelu_tanh(float* y, const float* x, int n) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const float v = x[idx];
  const float inner = 0.7978845608f * (v + 0.044715f * v * v * v);
  y[idx] = 0.5f * v * (1.0f + tanhf(inner));
}

void gelu(float* y, const float* x, int n) { gelu_tanh<<<(n + 127) / 128, 128>>>(y, x, n); }
