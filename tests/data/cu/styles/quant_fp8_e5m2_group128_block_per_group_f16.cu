// fp8 e5m2 quantization of gradients in 1 x 128 groups (Transformer Engine's E5M2 casts in the backward pass, the
// hybrid recipe): fp16 input, one block of 128 threads per group and one value a thread, the absolute maximum
// through a shared-memory tree, scale_inv = max(amax, 1e-12) / 57344 stored, the value divided by it and converted
// by the __nv_fp8_e5m2 constructor (saturating, to nearest even). The group count from the grid alone.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#define E5M2_MAX 57344.0f

/* kerntune:
args  = ["grad: in f16[rows * cols]", "grad_fp8: out u8[rows * cols]", "scale_inv: out f32[rows * cols / 128]"]
sizes = [{ rows = 4096, cols = 4096 }, { rows = 5, cols = 1152 }]
grid  = "rows * cols / 128"
block = "128"
*/
__global__ void cast_e5m2_1x128(const __half* __restrict__ grad, __nv_fp8_e5m2* __restrict__ grad_fp8,
                                float* __restrict__ scale_inv) {
  __shared__ float amax_s[128];
  const long long i = (long long)blockIdx.x * 128 + threadIdx.x;
  const float v = __half2float(grad[i]);
  amax_s[threadIdx.x] = fabsf(v);
  __syncthreads();
  for (int s = 64; s > 0; s >>= 1) {
    if (threadIdx.x < s) amax_s[threadIdx.x] = fmaxf(amax_s[threadIdx.x], amax_s[threadIdx.x + s]);
    __syncthreads();
  }
  const float sinv = fmaxf(amax_s[0], 1e-12f) / E5M2_MAX;
  if (threadIdx.x == 0) scale_inv[blockIdx.x] = sinv;
  grad_fp8[i] = __nv_fp8_e5m2(v / sinv);
}

void cast_e5m2(const __half* grad, __nv_fp8_e5m2* grad_fp8, float* scale_inv, int rows, int cols, cudaStream_t stream) {
  cast_e5m2_1x128<<<rows * cols / 128, 128, 0, stream>>>(grad, grad_fp8, scale_inv);
}
