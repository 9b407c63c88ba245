// GeGLU (tanh) over a stacked projection, fp16: the MLP's two projections come out of one batched GEMM as a
// [2, tokens, d] tensor, the UP half first and the gate half second, so the kernel reads x[i] (up) and x[i + count]
// (gate) over the flat element count: no per-row split, no row length. One element a thread, an int count, the
// activation in fp32 and one rounding at the store.
#include <cuda_fp16.h>

/* kerntune:
args  = ["proj: in f16[2 * tokens * d]", "out: out f16[tokens * d]", "count: i32 = tokens * d"]
sizes = [{ tokens = 2048, d = 8192 }, { tokens = 3, d = 4099 }]
grid  = "cdiv(tokens * d, 128)"
block = "128"
*/
__global__ void stacked_geglu_tanh(const __half* __restrict__ proj, __half* __restrict__ out, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) {
    const float up = __half2float(proj[i]);
    const float g = __half2float(proj[i + count]);
    const float inner = 0.7978845608f * (g + 0.044715f * g * g * g);
    out[i] = __float2half(0.5f * g * (1.0f + tanhf(inner)) * up);
  }
}

void stacked_geglu(const __half* proj, __half* out, int tokens, int d, cudaStream_t stream) {
  const int count = tokens * d;
  stacked_geglu_tanh<<<(count + 127) / 128, 128, 0, stream>>>(proj, out, count);
}
