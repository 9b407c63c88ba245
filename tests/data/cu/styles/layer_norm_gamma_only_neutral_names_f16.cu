// LayerNorm with a gamma and no beta (bias=False) in fp16, the input first and the output last, one block of 128
// threads per row, each warp's xor butterfly then four partial sums in shared memory; the statistics live in locals
// with neutral names (no `mean`, `mu` or `var` anywhere): what tells it from an RMSNorm is that the row's sum over
// its length is subtracted from every element. eps is the literal 1e-6f, fp32 math, one rounding.
#include <cuda_fp16.h>

__device__ __forceinline__ float block_sum_128(float a, float* buf) {
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  if ((threadIdx.x & 31) == 0) buf[threadIdx.x >> 5] = a;
  __syncthreads();
  a = buf[0] + buf[1] + buf[2] + buf[3];
  __syncthreads();
  return a;
}

/* kerntune:
args  = ["src: in f16[rows * cols]", "w: in f16[cols]", "dst: out f16[rows * cols]", "cols: i32 = cols",
         "rows: i32 = rows"]
sizes = [{ rows = 256, cols = 4096 }, { rows = 7, cols = 1000 }]
grid  = "rows"
block = "128"
*/
__global__ void ln_nobias_f16(const __half* __restrict__ src, const __half* __restrict__ w, __half* __restrict__ dst,
                              int cols, int rows) {
  __shared__ float buf[4];
  if (blockIdx.x >= rows) return;  // the whole block leaves together
  const __half* p = src + (size_t)blockIdx.x * cols;
  __half* q = dst + (size_t)blockIdx.x * cols;
  float a = 0.f;
  for (int c = threadIdx.x; c < cols; c += 128) a += __half2float(p[c]);
  const float s1 = block_sum_128(a, buf) / static_cast<float>(cols);
  float b = 0.f;
  for (int c = threadIdx.x; c < cols; c += 128) {
    const float t = __half2float(p[c]) - s1;
    b += t * t;
  }
  const float s2 = rsqrtf(block_sum_128(b, buf) / static_cast<float>(cols) + 1e-6f);
  for (int c = threadIdx.x; c < cols; c += 128)
    q[c] = __float2half((__half2float(p[c]) - s1) * s2 * __half2float(w[c]));
}

void ln_nobias_f16_launch(const __half* src, const __half* w, __half* dst, int cols, int rows, cudaStream_t s) {
  ln_nobias_f16<<<rows, 128, 0, s>>>(src, w, dst, cols, rows);
}
