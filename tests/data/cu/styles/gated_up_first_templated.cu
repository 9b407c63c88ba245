// GELU(erf)-and-mul, templated, up half first: y = up * gelu(gate) with [up | gate]
#include <cuda_bf16.h>
#define GEGLU_THREADS 128
/* kerntune:
args  = ["y: out bf16[m * n]", "xu: in bf16[m * 2 * n]", "n: i32 = n"]
sizes = [{ m = 256, n = 2048 }, { m = 33, n = 1001 }]
grid  = "m"
block = "GEGLU_THREADS"
*/
template <typename scalar_t>
__global__ void geglu(scalar_t* y, const scalar_t* xu, int n) {
  const scalar_t* row = xu + (size_t)blockIdx.x * 2 * n;
  for (int j = threadIdx.x; j < n; j += GEGLU_THREADS) {
    float up = __bfloat162float(row[j]);
    float gate = __bfloat162float(row[n + j]);
    float act = 0.5f * gate * (1.f + erff(gate * 0.7071067811865476f));
    y[(size_t)blockIdx.x * n + j] = __float2bfloat16(act * up);
  }
}
template __global__ void geglu<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int);

void run_geglu(__nv_bfloat16* y, const __nv_bfloat16* xu, int m, int n, cudaStream_t stream) {
  geglu<__nv_bfloat16><<<m, GEGLU_THREADS, 0, stream>>>(y, xu, n);
}
