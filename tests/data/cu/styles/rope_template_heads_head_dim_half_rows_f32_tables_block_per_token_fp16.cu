// Style kernel: rotary embedding whose head count and head size are template arguments (no int argument holds
// either), q [tokens, HEADS, HEAD_DIM] fp16 in place, NeoX halves, fp32 cos and sin tables of half a head per token
// ([tokens, HEAD_DIM / 2], gathered by the caller): one block a token, a thread a pair of one head.
#include <cuda_fp16.h>

/* kerntune:
args  = ["q: inout f16[tokens * 16 * 64]", "cos_t: in f32[tokens * 32] ~ uniform(-1, 1)",
         "sin_t: in f32[tokens * 32] ~ uniform(-1, 1)", "tokens: i32 = tokens"]
sizes = [{ tokens = 2048 }, { tokens = 5 }]
grid  = "tokens"
block = 128
template_args = ["16", "64"]
*/
template <int HEADS, int HEAD_DIM>
__global__ void rope_const_heads(__half* q, const float* cos_t, const float* sin_t, int tokens) {
  const int t = blockIdx.x;
  constexpr int HALF = HEAD_DIM / 2;
  for (int j = threadIdx.x; j < HEADS * HALF; j += blockDim.x) {
    const int h = j / HALF, d = j % HALF;
    const float c = cos_t[t * HALF + d], s = sin_t[t * HALF + d];
    __half* row = q + ((size_t)t * HEADS + h) * HEAD_DIM;
    const float a = __half2float(row[d]), b = __half2float(row[d + HALF]);
    row[d] = __float2half(a * c - b * s);
    row[d + HALF] = __float2half(b * c + a * s);
  }
}

void rope_const(__half* q, const float* cos_t, const float* sin_t, int tokens, cudaStream_t stream) {
  rope_const_heads<16, 64><<<tokens, 128, 0, stream>>>(q, cos_t, sin_t, tokens);
}
