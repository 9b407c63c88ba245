// RMSNorm fp16 in place, grid-stride over rows, the weight multiplied in fp32 before one rounding
#include <cuda_fp16.h>
namespace ops {
/* kerntune:
args  = ["h: inout f16[rows * hidden]", "gamma: in f16[hidden]", "rows: i32 = rows", "hidden: i32 = hidden", "epsilon: f32 = 1e-5"]
sizes = [{ rows = 512, hidden = 4096 }, { rows = 33, hidden = 1030 }]
grid  = "min(rows, 132)"
block = "256"
*/
__global__ void norm_inplace(__half* h, const __half* gamma, int rows, int hidden, float epsilon) {
  __shared__ float part[256];
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    __half* row = h + (size_t)r * hidden;
    float s = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) { float v = __half2float(row[i]); s += v * v; }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) { if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k]; __syncthreads(); }
    float inv = rsqrtf(part[0] / hidden + epsilon);
    __syncthreads();
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) row[i] = __float2half(__half2float(row[i]) * inv * __half2float(gamma[i]));
    __syncthreads();
  }
}
}  // namespace ops

void norm(__half* h, const __half* gamma, int rows, int hidden, float epsilon, cudaStream_t stream) {
  ops::norm_inplace<<<rows < 132 ? rows : 132, 256, 0, stream>>>(h, gamma, rows, hidden, epsilon);
}
