// Per-row absmax int8 quantization: max of |x| by a shared-memory tree, then scale, round and store int8.
#include <stdint.h>
/* kerntune:
args  = ["q: out i8[rows * cols]", "scale: out f32[rows]", "x: in f32[rows * cols]", "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 4096 }, { rows = 999, cols = 4099 }]
grid  = "rows"
block = "512"
rtol  = 0
atol  = 1
*/
__global__ void absmax_quant(int8_t* q, float* scale, const float* x, int cols) {
  __shared__ float red[512];
  const float* xr = x + (long long)blockIdx.x * cols;
  int8_t* qr = q + (long long)blockIdx.x * cols;
  float m = 0.f;
  for (int i = threadIdx.x; i < cols; i += 512) m = fmaxf(m, fabsf(xr[i]));
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = 256; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float amax = red[0];
  const float sc = amax > 0.f ? amax / 127.f : 1.f;
  if (threadIdx.x == 0) scale[blockIdx.x] = sc;
  for (int i = threadIdx.x; i < cols; i += 512) {
    float r = rintf(xr[i] / sc);
    qr[i] = (int8_t)fminf(fmaxf(r, -127.f), 127.f);
  }
}

void quant(int8_t* q, float* scale, const float* x, int rows, int cols) {
  absmax_quant<<<rows, 512>>>(q, scale, x, cols);
}
