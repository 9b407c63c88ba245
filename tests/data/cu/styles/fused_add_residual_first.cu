// fused add + RMSNorm bf16: the residual comes first in the argument list and is written first
#include <cuda_bf16.h>
/* kerntune:
args  = ["r: inout bf16[t * n]", "h: inout bf16[t * n]", "g: in bf16[n]", "n: i32 = n", "e: f32 = 1e-6"]
sizes = [{ t = 256, n = 4096 }, { t = 19, n = 1026 }]
grid  = "t"
block = "512"
*/
__global__ void add_norm(__nv_bfloat16* r, __nv_bfloat16* h, const __nv_bfloat16* g, int n, float e) {
  __shared__ float red[512];
  size_t o = (size_t)blockIdx.x * n;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += 512) {
    __nv_bfloat16 z = __float2bfloat16(__bfloat162float(h[o + i]) + __bfloat162float(r[o + i]));
    r[o + i] = z;
    float f = __bfloat162float(z);
    ss += f * f;
  }
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = 256; s > 0; s >>= 1) { if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s]; __syncthreads(); }
  float inv = rsqrtf(red[0] / n + e);
  for (int i = threadIdx.x; i < n; i += 512) {
    __nv_bfloat16 v = __float2bfloat16(__bfloat162float(r[o + i]) * inv);
    h[o + i] = __float2bfloat16(__bfloat162float(v) * __bfloat162float(g[i]));
  }
}

void add_rms_norm(__nv_bfloat16* r, __nv_bfloat16* h, const __nv_bfloat16* g, int t, int n, float e, cudaStream_t st) {
  add_norm<<<t, 512, 0, st>>>(r, h, g, n, e);
}
