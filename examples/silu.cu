// silu.cu — y = x * sigmoid(x), elementwise over float32.
// Written the way such code usually starts: a grid-stride loop and a small fixed launch.
#include <cuda_runtime.h>

/* kerntune:
args  = ["x: in f32[n]", "y: out f32[n]", "n: i32 = n"]
sizes = [{ n = 67108864 }, { n = 10000019 }]
grid  = "BLOCKS"
block = "THREADS"
*/
__global__ void silu(const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float v = x[i];
        y[i] = v / (1.0f + expf(-v));
    }
}

void silu_launch(const float* x, float* y, int n) {
    int threads = 128;
    int blocks = 256;
    silu<<<blocks, threads>>>(x, y, n);
}
