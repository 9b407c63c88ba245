// Bias + residual add + RMSNorm with the sum to a buffer of its own (TensorRT-LLM's residual out: the residual read
// from residual_in, the new residual stream written to residual_out), bf16 read and written as __nv_bfloat162 pairs
// (hidden even), one block of 128 per token: z = bf16(x + residual_in + bias) (fp32 adds, one rounding), normed =
// bf16(z * rsqrt(mean(z^2) + eps) * weight) (the weight multiplied in fp32). The outputs first, eps an argument,
// the sum of squares by warp shuffles and a __shared__ array of partials.
#include <cuda_bf16.h>
/* kerntune:
args  = ["normed: out bf16[tokens * hidden]", "residual_out: out bf16[tokens * hidden]",
         "x: in bf16[tokens * hidden]", "residual_in: in bf16[tokens * hidden]", "weight: in bf16[hidden]",
         "bias: in bf16[hidden]", "eps: f32 = 1e-6", "tokens: i32 = tokens", "hidden: i32 = hidden"]
sizes = [{ tokens = 1024, hidden = 4096 }, { tokens = 9, hidden = 2054 }]
grid  = "tokens"
block = "128"
*/
__global__ void add_bias_rms_residual_out(__nv_bfloat16* normed, __nv_bfloat16* residual_out,
                                          const __nv_bfloat16* x, const __nv_bfloat16* residual_in,
                                          const __nv_bfloat16* weight, const __nv_bfloat16* bias, float eps,
                                          int tokens, int hidden) {
  __shared__ float part[4];
  const size_t off = (size_t)blockIdx.x * hidden;
  const int pairs = hidden / 2;
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(x + off);
  const __nv_bfloat162* r2 = reinterpret_cast<const __nv_bfloat162*>(residual_in + off);
  const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(bias);
  __nv_bfloat162* s2 = reinterpret_cast<__nv_bfloat162*>(residual_out + off);
  float ss = 0.f;
  for (int i = threadIdx.x; i < pairs; i += 128) {
    const float2 xv = __bfloat1622float2(x2[i]);
    const float2 rv = __bfloat1622float2(r2[i]);
    const float2 bv = __bfloat1622float2(b2[i]);
    const __nv_bfloat162 z = __floats2bfloat162_rn(xv.x + rv.x + bv.x, xv.y + rv.y + bv.y);
    s2[i] = z;
    const float2 zf = __bfloat1622float2(z);
    ss += zf.x * zf.x + zf.y * zf.y;
  }
  for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  const float rstd = rsqrtf((part[0] + part[1] + part[2] + part[3]) / hidden + eps);
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(weight);
  __nv_bfloat162* n2 = reinterpret_cast<__nv_bfloat162*>(normed + off);
  for (int i = threadIdx.x; i < pairs; i += 128) {
    const float2 zf = __bfloat1622float2(s2[i]);
    const float2 wv = __bfloat1622float2(w2[i]);
    n2[i] = __floats2bfloat162_rn(zf.x * rstd * wv.x, zf.y * rstd * wv.y);
  }
}

void add_bias_rms_residual_out_launch(__nv_bfloat16* normed, __nv_bfloat16* residual_out, const __nv_bfloat16* x,
                                      const __nv_bfloat16* residual_in, const __nv_bfloat16* weight,
                                      const __nv_bfloat16* bias, float eps, int tokens, int hidden, cudaStream_t st) {
  add_bias_rms_residual_out<<<tokens, 128, 0, st>>>(normed, residual_out, x, residual_in, weight, bias, eps, tokens,
                                                    hidden);
}
