// RMSNorm bf16 whose parameters are spelled with the code base's own type names: a storage typedef at file
// scope and an index type of its namespace (as llm.c's floatX or CTranslate2's cuda::index_t); one block a row,
// fp32 sum of squares, rsqrtf(mean + eps), rounded once after the weight multiply
#include <cuda_bf16.h>

typedef __nv_bfloat16 act_t;

namespace engine {
using dim_t = int;

/* kerntune:
args  = ["y: out bf16[rows * width]", "x: in bf16[rows * width]", "w: in bf16[width]", "width: i32 = width", "eps: f32 = 1e-6"]
sizes = [{ rows = 2048, width = 4096 }, { rows = 7, width = 1000 }]
grid  = "rows"
block = "256"
*/
__global__ void rms_norm_own_types(act_t* y, const act_t* x, const act_t* w, dim_t width, float eps) {
  __shared__ float acc[256];
  const act_t* xr = x + (size_t)blockIdx.x * width;
  float s = 0.f;
  for (dim_t i = threadIdx.x; i < width; i += 256) { float v = __bfloat162float(xr[i]); s += v * v; }
  acc[threadIdx.x] = s;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) { if (threadIdx.x < k) acc[threadIdx.x] += acc[threadIdx.x + k]; __syncthreads(); }
  const float inv = rsqrtf(acc[0] / (float)width + eps);
  for (dim_t i = threadIdx.x; i < width; i += 256)
    y[(size_t)blockIdx.x * width + i] = __float2bfloat16(__bfloat162float(xr[i]) * inv * __bfloat162float(w[i]));
}
}  // namespace engine

void rms_norm(act_t* y, const act_t* x, const act_t* w, int rows, int width, float eps, cudaStream_t stream) {
  engine::rms_norm_own_types<<<rows, 256, 0, stream>>>(y, x, w, width, eps);
}
