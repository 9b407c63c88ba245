// Skip LayerNorm without an epsilon and without a sum output, in bf16: outputs first, no bias, a warp a row (eight
// rows a block, the row count an argument), the sum x + skip rounded to bf16 and written to the output, then
// normalized in place by a __device__ helper the kernel hands gamma and beta to: the mean as the sum times 1 /
// float(n), the centred variance, rsqrtf of the variance itself (no eps), fp32 statistics.
#include <cuda_bf16.h>

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// the row (already holding x + skip) normalized in place
__device__ void normalize_row(__nv_bfloat16* row, const __nv_bfloat16* g, const __nv_bfloat16* b, int n,
                              float inv_n, int lane) {
  float s = 0.f;
  for (int i = lane; i < n; i += 32) s += __bfloat162float(row[i]);
  const float mean = warp_sum(s) * inv_n;
  float q = 0.f;
  for (int i = lane; i < n; i += 32) {
    const float d = __bfloat162float(row[i]) - mean;
    q += d * d;
  }
  const float rs = rsqrtf(warp_sum(q) * inv_n);
  for (int i = lane; i < n; i += 32)
    row[i] = __float2bfloat16((__bfloat162float(row[i]) - mean) * rs * __bfloat162float(g[i]) + __bfloat162float(b[i]));
}

/* kerntune:
args  = ["out: out bf16[rows * n]", "x: in bf16[rows * n]", "skip: in bf16[rows * n]", "gamma: in bf16[n]",
         "beta: in bf16[n]", "rows: i32 = rows", "n: i32 = n"]
sizes = [{ rows = 4096, n = 1024 }, { rows = 5, n = 3000 }]
grid  = "cdiv(rows, 8)"
block = 256
*/
__global__ void skip_ln_no_eps(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ x,
                               const __nv_bfloat16* __restrict__ skip, const __nv_bfloat16* __restrict__ gamma,
                               const __nv_bfloat16* __restrict__ beta, int rows, int n) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float inv_n = 1.f / float(n);
  const size_t off = (size_t)row * n;
  for (int i = lane; i < n; i += 32)
    out[off + i] = __float2bfloat16(__bfloat162float(x[off + i]) + __bfloat162float(skip[off + i]));
  __syncwarp();
  normalize_row(out + off, gamma, beta, n, inv_n, lane);
}

void skip_ln_no_eps_launch(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* skip,
                           const __nv_bfloat16* gamma, const __nv_bfloat16* beta, int rows, int n, cudaStream_t s) {
  skip_ln_no_eps<<<(rows + 7) / 8, 256, 0, s>>>(out, x, skip, gamma, beta, rows, n);
}
