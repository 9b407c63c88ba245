// merge attention states bf16 with natural lse [heads, tokens], no token-count argument: one block per (token,
// head), the token count read from gridDim.x inside the kernel; a prefix/suffix naming and the lses after values
#include <cuda_bf16.h>
/* kerntune:
args  = ["prefix: in bf16[t * h * d]", "suffix: in bf16[t * h * d]", "prefix_lse: in f32[h * t]",
         "suffix_lse: in f32[h * t]", "merged: out bf16[t * h * d]", "heads: i32 = h", "dim: i32 = d"]
sizes = [{ t = 300, h = 8, d = 128 }, { t = 7, h = 3, d = 64 }]
grid  = ["t", "h"]
block = "32"
*/
__global__ void merge_prefix_suffix(const __nv_bfloat16* prefix, const __nv_bfloat16* suffix, const float* prefix_lse,
                                    const float* suffix_lse, __nv_bfloat16* merged, int heads, int dim) {
  const int token = blockIdx.x, head = blockIdx.y, tokens = gridDim.x;
  const float lp = prefix_lse[head * tokens + token], ls = suffix_lse[head * tokens + token];
  const float mx = fmaxf(lp, ls);
  const float wp = __expf(lp - mx), ws = __expf(ls - mx);
  const float inv = 1.f / (wp + ws);
  const __nv_bfloat16* p = prefix + ((long)token * heads + head) * dim;
  const __nv_bfloat16* s = suffix + ((long)token * heads + head) * dim;
  __nv_bfloat16* o = merged + ((long)token * heads + head) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    o[i] = __float2bfloat16((__bfloat162float(p[i]) * wp + __bfloat162float(s[i]) * ws) * inv);
}

void merge_states(const __nv_bfloat16* prefix, const __nv_bfloat16* suffix, const float* plse, const float* slse,
                  __nv_bfloat16* out, int tokens, int heads, int dim, cudaStream_t stream) {
  merge_prefix_suffix<<<dim3(tokens, heads), 32, 0, stream>>>(prefix, suffix, plse, slse, out, heads, dim);
}
