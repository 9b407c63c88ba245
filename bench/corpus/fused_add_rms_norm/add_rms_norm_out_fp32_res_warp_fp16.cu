// Residual add + RMSNorm for a model that keeps its residual stream in fp32 and its activations in fp16, written the
// way lightweight inference engines write it: one warp per token, 8 tokens a block, the fp16 branch output added
// into the fp32 residual in place, the normalized token written to a separate fp16 buffer with an fp32 weight,
// eps inside the root, the normalized value rounded to fp16 before the weight multiply, as the reference does.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* kerntune:
args  = ["branch: in f16[n_tok * dim]", "resid: inout f32[n_tok * dim]", "norm_w: in f32[dim]",
         "y: out f16[n_tok * dim]", "n_tok: i32 = n_tok", "dim: i32 = dim", "eps: f32 = 1e-5"]
sizes = [{ n_tok = 8192, dim = 4096 }, { n_tok = 24, dim = 8192 }, { n_tok = 1001, dim = 2050 }]
grid  = "cdiv(n_tok, 8)"
block = "256"
*/
__global__ void add_rms_out_kernel(const __half* __restrict__ branch, float* __restrict__ resid,
                                   const float* __restrict__ norm_w, __half* __restrict__ y, int n_tok, int dim,
                                   float eps) {
  const int tok = blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (tok >= n_tok) return;
  float* r = resid + (size_t)tok * dim;
  const __half* h = branch + (size_t)tok * dim;
  float ss = 0.f;
  for (int i = lane; i < dim; i += 32) {
    const float z = r[i] + __half2float(h[i]);
    r[i] = z;
    ss += z * z;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / dim + eps);
  __half* out = y + (size_t)tok * dim;
  for (int i = lane; i < dim; i += 32) {
    const __half nrm = __float2half(r[i] * inv);
    out[i] = __float2half(__half2float(nrm) * norm_w[i]);
  }
}

void add_rms_out(const __half* branch, float* resid, const float* norm_w, __half* y, int n_tok, int dim, float eps,
                 cudaStream_t stream) {
  add_rms_out_kernel<<<(n_tok + 7) / 8, 256, 0, stream>>>(branch, resid, norm_w, y, n_tok, dim, eps);
}
