// attention-score softmax: fp16 scores times a scale to fp32 probabilities, grid-stride over rows, online max/sum
#include <cuda_fp16.h>
/* kerntune:
args  = ["scores: in f16[rows * cols]", "probs: out f32[rows * cols]", "rows: i32 = rows", "cols: i32 = cols",
         "scale: f32 = 0.125"]
sizes = [{ rows = 512, cols = 2048 }, { rows = 33, cols = 1001 }]
grid  = "min(rows, 264)"
block = "256"
*/
__global__ void scaled_softmax(const __half* scores, float* probs, int rows, int cols, float scale) {
  __shared__ float red[256];
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const __half* x = scores + (size_t)r * cols;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < cols; i += 256) m = fmaxf(m, __half2float(x[i]) * scale);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) { if (threadIdx.x < k) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + k]); __syncthreads(); }
    m = red[0];
    __syncthreads();
    float s = 0.f;
    for (int i = threadIdx.x; i < cols; i += 256) s += __expf(__half2float(x[i]) * scale - m);
    red[threadIdx.x] = s;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) { if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k]; __syncthreads(); }
    s = red[0];
    __syncthreads();
    for (int i = threadIdx.x; i < cols; i += 256) probs[(size_t)r * cols + i] = __expf(__half2float(x[i]) * scale - m) / s;
  }
}

void softmax_scores(const __half* scores, float* probs, int rows, int cols, float scale, cudaStream_t stream) {
  scaled_softmax<<<rows < 264 ? rows : 264, 256, 0, stream>>>(scores, probs, rows, cols, scale);
}
