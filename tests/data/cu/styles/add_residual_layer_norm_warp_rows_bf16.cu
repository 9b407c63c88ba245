// Residual add + LayerNorm in bf16 with no bias (the pre-norm of a LayerNorm model's decoder layer, vLLM / SGLang
// style): residual = bf16(x + residual) (added in fp32, one rounding), out = LayerNorm(residual) to a buffer of its
// own, a warp per row (8 rows a block, shuffles only), eps the literal 1e-5f, the mean and the centred variance of
// the rounded sum (re-read from the residual); beta before gamma in the argument list, the row count last.
#include <cuda_bf16.h>
/* kerntune:
args  = ["out: out bf16[rows * cols]", "x: in bf16[rows * cols]", "residual: inout bf16[rows * cols]",
         "beta: in bf16[cols]", "gamma: in bf16[cols]", "cols: i32 = cols", "rows: i32 = rows"]
sizes = [{ rows = 512, cols = 2560 }, { rows = 7, cols = 1022 }]
grid  = "(rows + 7) / 8"
block = ["32", "8"]
*/
__global__ void add_residual_ln_warp(__nv_bfloat16* out, const __nv_bfloat16* x, __nv_bfloat16* residual,
                                     const __nv_bfloat16* beta, const __nv_bfloat16* gamma, int cols, int rows) {
  const int row = blockIdx.x * 8 + threadIdx.y;
  if (row >= rows) return;
  const size_t off = (size_t)row * cols;
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) {
    const __nv_bfloat16 z = __float2bfloat16(__bfloat162float(x[off + c]) + __bfloat162float(residual[off + c]));
    residual[off + c] = z;
    s += __bfloat162float(z);
  }
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float mu = s / cols;
  float q = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) {
    const float d = __bfloat162float(residual[off + c]) - mu;
    q += d * d;
  }
  for (int o = 16; o; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
  const float rstd = rsqrtf(q / cols + 1e-5f);
  for (int c = threadIdx.x; c < cols; c += 32)
    out[off + c] = __float2bfloat16((__bfloat162float(residual[off + c]) - mu) * rstd * __bfloat162float(gamma[c]) +
                                    __bfloat162float(beta[c]));
}

void add_residual_ln_warp_launch(__nv_bfloat16* out, const __nv_bfloat16* x, __nv_bfloat16* residual,
                                 const __nv_bfloat16* beta, const __nv_bfloat16* gamma, int cols, int rows,
                                 cudaStream_t st) {
  add_residual_ln_warp<<<(rows + 7) / 8, dim3(32, 8), 0, st>>>(out, x, residual, beta, gamma, cols, rows);
}
