// Post-norm residual add (Gemma-2/3 sandwich norms: h = residual + post_norm(attn_out), as llama.cpp fuses
// rms_norm * mul + add into one kernel): the RMSNorm of x times the weight, plus the residual row, in fp32 with one
// rounding to bf16, written to a buffer of its own. One row per 256-thread block (the row count an argument, the
// blocks past it idle), a shared-memory tree. Arguments (out, x, residual, w, eps, rows, dim).
#include <cuda_bf16.h>
/* kerntune:
args  = ["out: out bf16[rows * dim]", "x: in bf16[rows * dim]", "residual: in bf16[rows * dim]", "w: in bf16[dim]",
         "eps: f32 = 1e-6", "rows: i32 = rows", "dim: i32 = dim"]
sizes = [{ rows = 128, dim = 3584 }, { rows = 5, dim = 1001 }]
grid  = "rows"
block = "256"
*/
__global__ void post_norm_add(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ x,
                              const __nv_bfloat16* __restrict__ residual, const __nv_bfloat16* __restrict__ w,
                              float eps, int rows, int dim) {
  __shared__ float buf[256];
  const int row = blockIdx.x;
  if (row >= rows) return;
  const size_t base = (size_t)row * dim;
  float s = 0.f;
  for (int i = threadIdx.x; i < dim; i += 256) {
    const float v = __bfloat162float(x[base + i]);
    s += v * v;
  }
  buf[threadIdx.x] = s;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) buf[threadIdx.x] += buf[threadIdx.x + k];
    __syncthreads();
  }
  const float r = rsqrtf(buf[0] / dim + eps);
  for (int i = threadIdx.x; i < dim; i += 256) {
    const float n = __bfloat162float(x[base + i]) * r * __bfloat162float(w[i]);
    out[base + i] = __float2bfloat16(__bfloat162float(residual[base + i]) + n);
  }
}

void post_norm_add_launch(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* residual,
                          const __nv_bfloat16* w, float eps, int rows, int dim, cudaStream_t stream) {
  post_norm_add<<<rows, 256, 0, stream>>>(out, x, residual, w, eps, rows, dim);
}
