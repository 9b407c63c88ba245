// GEGLU as Transformer Engine's gated_act_kernel computes it: act(a) * b for a row [a | b] of 2 * n, the GELU in TE's
// own form x * (0.5 + 0.5 * tanhf(x * (0.79788456 + 0.03567741 * x * x))), fp32 math, one rounding at the store;
// the input, the output, then the row count m and the output's column count n (size_t), a grid-stride loop over m * n.
#include <cuda_bf16.h>
#include <cstddef>

/* kerntune:
args  = ["input: in bf16[m * 2 * n]", "output: out bf16[m * n]", "m: u64 = m", "n: u64 = n"]
sizes = [{ m = 2048, n = 4096 }, { m = 3, n = 1001 }]
grid  = "min(cdiv(m * n, 256), 4096)"
block = "256"
*/
__global__ void geglu_te(const __nv_bfloat16* input, __nv_bfloat16* output, const size_t m, const size_t n) {
  const size_t total = m * n;
  for (size_t tid = blockIdx.x * blockDim.x + threadIdx.x; tid < total; tid += (size_t)gridDim.x * blockDim.x) {
    const size_t row = tid / n, col = tid % n;
    const float cval = __bfloat162float(input[row * n * 2 + col]);
    const float gate = __bfloat162float(input[row * n * 2 + n + col]);
    const float act = cval * (0.5F + 0.5F * tanhf(cval * (0.79788456F + 0.03567741F * cval * cval)));
    output[tid] = __float2bfloat16(act * gate);
  }
}

void geglu(const __nv_bfloat16* input, __nv_bfloat16* output, size_t m, size_t n, cudaStream_t stream) {
  size_t blocks = (m * n + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  geglu_te<<<(unsigned)blocks, 256, 0, stream>>>(input, output, m, n);
}
