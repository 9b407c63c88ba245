// RMSNorm over bf16 rows, the weight applied after the cast back to bf16; block-stride loops, tree reduction.
#include <cuda_bf16.h>
/* kerntune:
args  = ["out: out bf16[rows * hidden]", "x: in bf16[rows * hidden]", "w: in bf16[hidden]", "hidden: i32 = hidden",
         "eps: f32 = 1e-6"]
sizes = [{ rows = 4096, hidden = 4096 }, { rows = 333, hidden = 5003 }]
grid  = "rows"
block = "256"
*/
__global__ void rmsnorm_cast(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w, int hidden, float eps) {
  __shared__ float red[256];
  const __nv_bfloat16* xr = x + (long long)blockIdx.x * hidden;
  __nv_bfloat16* yr = out + (long long)blockIdx.x * hidden;
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += 256) {
    float v = __bfloat162float(xr[i]);
    ss += v * v;
  }
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(red[0] / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += 256)
    yr[i] = __float2bfloat16(__bfloat162float(xr[i]) * inv) * w[i];
}

void rmsnorm(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* w, int rows, int hidden, float eps) {
  rmsnorm_cast<<<rows, 256>>>(out, x, w, hidden, eps);
}
