// Squared-ReLU GLU (Transformer Engine's sreglu, Primer's relu^2 gate): out = (x > 0 ? x * x : 0) * y, fp16, the
// square and the product in half arithmetic (each rounded to fp16, as __hmul does), the gate half first.
// 2-D blocks: threadIdx.y a token of the block's 4, threadIdx.x striding the token's columns.
#include <cuda_fp16.h>

#define TOKENS_PER_BLOCK 4

/* kerntune:
args  = ["y: out f16[tokens * hidden]", "x: in f16[tokens * 2 * hidden]", "tokens: i32 = tokens", "hidden: i32 = hidden"]
sizes = [{ tokens = 1024, hidden = 8192 }, { tokens = 7, hidden = 3001 }]
grid  = "cdiv(tokens, 4)"
block = ["128", "4"]
*/
__global__ void sqrelu_and_mul(__half* __restrict__ y, const __half* __restrict__ x, int tokens, int hidden) {
  const int t = blockIdx.x * TOKENS_PER_BLOCK + threadIdx.y;
  if (t >= tokens) return;
  const __half* row = x + (size_t)t * 2 * hidden;
  const __half zero = __float2half(0.0f);
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    const __half g = row[c];
    const __half sq = __hgt(g, zero) ? __hmul(g, g) : zero;
    y[(size_t)t * hidden + c] = __hmul(sq, row[hidden + c]);
  }
}

void sqrelu_glu(__half* y, const __half* x, int tokens, int hidden, cudaStream_t stream) {
  sqrelu_and_mul<<<(tokens + TOKENS_PER_BLOCK - 1) / TOKENS_PER_BLOCK, dim3(128, TOKENS_PER_BLOCK), 0, stream>>>(
      y, x, tokens, hidden);
}
