// Softmax over the channels of an [outer, channels, inner] fp16 tensor, in place, one thread a (outer, inner) column
// in a grid-stride loop; each pass walks the column with the logits' index itself as the loop variable, from the
// column's first element to an exclusive end `channels * inner` past it, stepping by `inner`; fp32 math, the
// exponentials kept in fp32 registers only for the sum (recomputed for the store), one rounding at the store.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* kerntune:
args  = ["x: inout f16[outer * channels * inner] ~ uniform(-4, 4)", "columns: i64 = outer * inner",
         "inner: i64 = inner", "channels: i64 = channels"]
sizes = [{ outer = 32, channels = 128, inner = 4096 }, { outer = 2, channels = 1000, inner = 1 },
         { outer = 5, channels = 19, inner = 777 }]
grid  = "min(cdiv(outer * inner, 256), 1024)"
block = 256
atol  = 1e-3
*/
__global__ void channel_softmax_walk(__half* x, long long columns, long long inner, long long channels) {
  for (long long col = blockIdx.x * (long long)blockDim.x + threadIdx.x; col < columns;
       col += (long long)gridDim.x * blockDim.x) {
    const long long first = (col / inner) * channels * inner + col % inner;
    const long long stop = first + channels * inner;
    float m = -INFINITY;
    for (long long i = first; i < stop; i += inner) m = fmaxf(m, __half2float(x[i]));
    float sum = 0.f;
    for (long long i = first; i < stop; i += inner) sum += __expf(__half2float(x[i]) - m);
    const float inv = 1.f / sum;
    for (long long i = first; i < stop; i += inner) x[i] = __float2half(__expf(__half2float(x[i]) - m) * inv);
  }
}

void channel_softmax(__half* x, long long outer, long long channels, long long inner, cudaStream_t stream) {
  const long long columns = outer * inner;
  long long blocks = (columns + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  channel_softmax_walk<<<(unsigned)blocks, 256, 0, stream>>>(x, columns, inner, channels);
}
