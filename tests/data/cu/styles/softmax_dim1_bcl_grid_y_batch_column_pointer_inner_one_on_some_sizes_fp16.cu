// Style kernel: softmax over dim=1 of a [B, C, L] tensor (a 1-D sequence layout: batch, channels, length), fp16 in
// and out with the math in fp32: a 2-D grid, blockIdx.y the batch, x threads over the length; each thread walks
// its column through a local pointer, the channels `L` apart (col[c * L]), three passes. On some size sets the
// length is 1 (a classifier's logits kept as [B, C, 1]): there the walk is along a row, elsewhere strided.
#include <cuda_fp16.h>

/* kerntune:
args  = ["logits: in f16[B * C * L]", "probs: out f16[B * C * L]", "C: i32 = C", "L: i32 = L"]
sizes = [{ B = 64, C = 1000, L = 1 }, { B = 2, C = 40, L = 17 }, { B = 16, C = 96, L = 4099 }]
grid  = ["cdiv(L, 128)", "B"]
block = 128
*/
__global__ void softmax_dim1_bcl(const __half* __restrict__ logits, __half* __restrict__ probs, int C, int L) {
  const int l = blockIdx.x * blockDim.x + threadIdx.x;
  if (l >= L) return;
  const size_t base = (size_t)blockIdx.y * C * L + l;
  const __half* col = logits + base;
  float mx = -INFINITY;
  for (int c = 0; c < C; ++c) mx = fmaxf(mx, __half2float(col[(size_t)c * L]));
  float den = 0.f;
  for (int c = 0; c < C; ++c) den += __expf(__half2float(col[(size_t)c * L]) - mx);
  __half* out = probs + base;
  for (int c = 0; c < C; ++c) out[(size_t)c * L] = __float2half(__expf(__half2float(col[(size_t)c * L]) - mx) / den);
}

void softmax_dim1(const __half* logits, __half* probs, int B, int C, int L, cudaStream_t stream) {
  dim3 grid((L + 127) / 128, B);
  softmax_dim1_bcl<<<grid, 128, 0, stream>>>(logits, probs, C, L);
}
