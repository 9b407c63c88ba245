// Scale, clamp and cast fp32 -> bf16 (e.g. activations handed from an fp32 producer to a bf16 consumer with a
// saturation limit): out = bf16(clamp(in * scale, -limit, limit)), one element per thread over a flat index.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["out: out bf16[rows * cols]", "in: in f32[rows * cols]", "scale: f32 = 0.125", "limit: f32 = 0.25",
         "n: i64 = rows * cols"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 64, cols = 8192 }, { rows = 1000, cols = 4099 }]
grid  = "cdiv(rows * cols, 128)"
block = "128"
*/
__global__ void scale_clamp_to_bf16(__nv_bfloat16* __restrict__ out, const float* __restrict__ in, float scale,
                                    float limit, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(fminf(fmaxf(in[i] * scale, -limit), limit));
}

void scale_clamp_to_bf16_launch(__nv_bfloat16* out, const float* in, float scale, float limit, int64_t n,
                                cudaStream_t stream) {
  const int threads = 128;
  const int64_t blocks = (n + threads - 1) / threads;
  scale_clamp_to_bf16<<<blocks, threads, 0, stream>>>(out, in, scale, limit, n);
}
