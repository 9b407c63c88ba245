// Style kernel: GeGLU (tanh GELU of the gate times up) written in place over the gate, fp16, one flat element count
// (no row length: the kernel is elementwise over tokens * d), a capped grid-stride loop; the products written as
// compound assignments (`g *= ...`), the math in fp32, one rounding.
#include <cuda_fp16.h>

/* kerntune:
args  = ["gate: inout f16[tokens * d]", "up: in f16[tokens * d]", "n: i64 = tokens * d"]
sizes = [{ tokens = 4096, d = 11008 }, { tokens = 2, d = 11008 }, { tokens = 37, d = 1375 }]
grid  = "min(cdiv(tokens * d, 256), 2048)"
block = 256
*/
__global__ void geglu_inplace_f16(__half* gate, const __half* up, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    float g = __half2float(gate[i]);
    const float inner = 0.7978845608f * (g + 0.044715f * g * g * g);
    g *= 0.5f * (1.0f + tanhf(inner));
    g *= __half2float(up[i]);
    gate[i] = __float2half(g);
  }
}

void geglu_inplace(__half* gate, const __half* up, int tokens, int d, cudaStream_t stream) {
  const long long n = (long long)tokens * d;
  long long blocks = (n + 255) / 256;
  if (blocks > 2048) blocks = 2048;
  geglu_inplace_f16<<<(unsigned)blocks, 256, 0, stream>>>(gate, up, n);
}
