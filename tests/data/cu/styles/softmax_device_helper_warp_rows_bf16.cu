// Softmax over rows (bf16 in, fp32 out) with a warp per row and the whole computation in a __device__ helper that
// takes the row's pointers and the row length by reference; max and sum by helper reductions. Block (32, 4): four
// rows a block, a row-count argument guards the last block.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_add(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ void softmax_row(float* dst, const __nv_bfloat16* src, const int& cols) {
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += 32) m = fmaxf(m, __bfloat162float(src[c]));
  m = warp_max(m);
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) s += __expf(__bfloat162float(src[c]) - m);
  s = warp_add(s);
  const float inv = 1.f / s;
  for (int c = threadIdx.x; c < cols; c += 32) dst[c] = __expf(__bfloat162float(src[c]) - m) * inv;
}

/* kerntune:
args  = ["probs: out f32[rows * cols]", "logits: in bf16[rows * cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 8192, cols = 2048 }, { rows = 5, cols = 1024 }, { rows = 1003, cols = 1501 }]
grid  = "cdiv(rows, 4)"
block = [32, 4]
atol  = 1e-6
*/
__global__ void __launch_bounds__(128) softmax_warp_rows_kernel(float* __restrict__ probs,
                                                               const __nv_bfloat16* __restrict__ logits, int rows,
                                                               int cols) {
  const int row = blockIdx.x * 4 + threadIdx.y;
  if (row >= rows) return;
  const int64_t base = static_cast<int64_t>(row) * cols;
  softmax_row(probs + base, logits + base, cols);
}

void softmax_warp_rows(float* probs, const __nv_bfloat16* logits, int rows, int cols, cudaStream_t stream) {
  softmax_warp_rows_kernel<<<dim3((rows + 3) / 4), dim3(32, 4), 0, stream>>>(probs, logits, rows, cols);
}
