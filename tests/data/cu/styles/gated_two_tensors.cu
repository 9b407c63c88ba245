// SwiGLU with the gate and the up projection as two tensors, fp16, one flat 64-bit index
#include <cuda_fp16.h>
/* kerntune:
args  = ["gate: in f16[rows * n]", "up: in f16[rows * n]", "dst: out f16[rows * n]", "n: i32 = n",
         "total: i64 = rows * n"]
sizes = [{ rows = 256, n = 4096 }, { rows = 9, n = 1001 }]
grid  = "cdiv(rows * n, 256)"
block = "256"
*/
__global__ void swiglu_split(const __half* gate, const __half* up, __half* dst, int n, long long total) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const float g = __half2float(gate[i]);
  dst[i] = __float2half(g / (1.0f + __expf(-g)) * __half2float(up[i]));
}

void swiglu(const __half* gate, const __half* up, __half* dst, int rows, int n, cudaStream_t stream) {
  const long long total = (long long)rows * n;
  swiglu_split<<<(unsigned)((total + 255) / 256), 256, 0, stream>>>(gate, up, dst, n, total);
}
