// ReGLU (Transformer Engine's reglu, llama.cpp's GLU op REGLU): out = max(a, 0) * b for a gated row [a | b] of 2 * n
// columns, bf16 in and out, fp32 math and one rounding at the store. The input first, then the output, the row
// count m and the output's column count n (as TE's gated_act_kernel takes them); a flat 1-D grid over m * n with a
// 64-bit index split into row and column.
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["input: in bf16[m * 2 * n]", "output: out bf16[m * n]", "m: i64 = m", "n: i64 = n"]
sizes = [{ m = 2048, n = 5632 }, { m = 3, n = 1377 }]
grid  = "cdiv(m * n, 512)"
block = "512"
*/
__global__ void reglu_kernel(const __nv_bfloat16* __restrict__ input, __nv_bfloat16* __restrict__ output,
                             const int64_t m, const int64_t n) {
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= m * n) return;
  const int64_t row = idx / n;
  const int64_t col = idx - row * n;
  const float a = __bfloat162float(input[row * 2 * n + col]);
  const float b = __bfloat162float(input[row * 2 * n + n + col]);
  output[idx] = __float2bfloat16(fmaxf(a, 0.0f) * b);
}

void reglu(const __nv_bfloat16* input, __nv_bfloat16* output, int64_t m, int64_t n, cudaStream_t stream) {
  const int64_t total = m * n;
  reglu_kernel<<<(unsigned)((total + 511) / 512), 512, 0, stream>>>(input, output, m, n);
}
