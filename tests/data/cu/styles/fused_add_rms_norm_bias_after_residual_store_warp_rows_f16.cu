// Fused add + RMSNorm fp16 where the bias joins only the normalized row: s = x + residual (rounded to half) is
// stored as the new residual stream, then t = s + bias (rounded to half) is what the row's RMS is taken over and
// what is normalized; the weight multiplied in fp32, one rounding at the store into an output of its own. A warp
// per row, 8 rows per block, lanes striding over the row, the row's values kept in shared memory between passes.
#include <cuda_fp16.h>

/* kerntune:
args  = ["out: out f16[rows * hidden]", "x: in f16[rows * hidden]", "residual: inout f16[rows * hidden]",
         "bias: in f16[hidden]", "weight: in f16[hidden]", "rows: i32 = rows", "hidden: i32 = hidden",
         "epsilon: f32 = 1e-5"]
sizes = [{ rows = 2048, hidden = 4096 }, { rows = 3, hidden = 1000 }]
grid  = "cdiv(rows, 8)"
block = [32, 8]
smem  = "8 * hidden * 2"
*/
__global__ void add_rms_bias_after(__half* __restrict__ out, const __half* __restrict__ x,
                                   __half* __restrict__ residual, const __half* __restrict__ bias,
                                   const __half* __restrict__ weight, int rows, int hidden, float epsilon) {
  extern __shared__ __half staged[];
  const int row = blockIdx.x * 8 + threadIdx.y;
  if (row >= rows) return;
  __half* t_row = staged + threadIdx.y * hidden;
  const long long base = (long long)row * hidden;
  float sq = 0.f;
  for (int c = threadIdx.x; c < hidden; c += 32) {
    const __half s = __hadd(x[base + c], residual[base + c]);
    residual[base + c] = s;
    const __half t = __hadd(s, bias[c]);
    t_row[c] = t;
    const float f = __half2float(t);
    sq += f * f;
  }
  for (int m = 16; m > 0; m >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, m);
  const float r = rsqrtf(sq / hidden + epsilon);
  for (int c = threadIdx.x; c < hidden; c += 32)
    out[base + c] = __float2half(__half2float(t_row[c]) * r * __half2float(weight[c]));
}
