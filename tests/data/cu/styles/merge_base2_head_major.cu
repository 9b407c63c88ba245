// merge attention states fp16 with base-2 lse [heads, tokens] and an output lse; the value heads come first
#include <cuda_fp16.h>
/* kerntune:
args  = ["o: out f16[n * h * d]", "o_lse: out f32[h * n]", "a: in f16[n * h * d]", "a_lse: in f32[h * n]", "b: in f16[n * h * d]", "b_lse: in f32[h * n]", "heads: i32 = h", "n: i32 = n", "d: i32 = d"]
sizes = [{ n = 256, h = 16, d = 128 }, { n = 17, h = 5, d = 64 }]
grid  = ["n", "h"]
block = "64"
*/
__global__ void merge2(__half* o, float* o_lse, const __half* a, const float* a_lse, const __half* b, const float* b_lse,
                       int heads, int n, int d) {
  int tok = blockIdx.x, hd = blockIdx.y;
  float la = a_lse[hd * n + tok], lb = b_lse[hd * n + tok];
  float m = fmaxf(la, lb);
  float ea = exp2f(la - m), eb = exp2f(lb - m), s = ea + eb;
  size_t base = ((size_t)tok * heads + hd) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    o[base + i] = __float2half((__half2float(a[base + i]) * ea + __half2float(b[base + i]) * eb) / s);
  if (threadIdx.x == 0) o_lse[hd * n + tok] = log2f(s) + m;
}

void merge_base2(__half* o, float* o_lse, const __half* a, const float* a_lse, const __half* b, const float* b_lse,
                 int h, int n, int d, cudaStream_t stream) {
  merge2<<<dim3(n, h), 64, 0, stream>>>(o, o_lse, a, a_lse, b, b_lse, h, n, d);
}
