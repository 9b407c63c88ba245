// RMSNorm of fp16 hidden states into an fp32 output (ExLlamaV2's output_fp32, ONNX Runtime's SimplifiedLayerNorm
// <half, float, float>: the final norm feeding an fp32 head): an fp16 weight, one row per 512-thread block (the row
// count is the grid), a shared-memory tree reduction, the reciprocal RMS published by thread 0 through shared
// memory; every product in fp32, nothing rounded. Arguments (x, w, y, eps, n).
#include <cuda_fp16.h>
/* kerntune:
args  = ["x: in f16[T * n]", "w: in f16[n]", "y: out f32[T * n]", "eps: f32 = 1e-5", "n: i32 = n"]
sizes = [{ T = 64, n = 5120 }, { T = 3, n = 997 }]
grid  = "T"
block = "512"
*/
__global__ void rms_half_to_float(const __half* x, const __half* w, float* y, float eps, int n) {
  __shared__ float part[512];
  __shared__ float inv;
  const __half* row = x + (size_t)blockIdx.x * n;
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += 512) {
    const float v = __half2float(row[i]);
    acc += v * v;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = 256; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) inv = rsqrtf(part[0] / n + eps);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += 512)
    y[(size_t)blockIdx.x * n + i] = __half2float(row[i]) * inv * __half2float(w[i]);
}

void rms_half_to_float_launch(const __half* x, const __half* w, float* y, float eps, int T, int n, cudaStream_t s) {
  rms_half_to_float<<<T, 512, 0, s>>>(x, w, y, eps, n);
}
