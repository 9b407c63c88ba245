// Templatizer fixture: a grid-stride loop launched on enough blocks for 4 items per thread.
#include <cuda_runtime.h>

static inline int cdiv(int a, int b) { return (a + b - 1) / b; }

/* kerntune:
args  = ["x: in f32[n]", "y: out f32[n]", "n: i32 = n"]
sizes = [{ n = 16777216 }, { n = 1000003 }]
grid  = "cdiv(n, 256 * 4)"
block = "256"
*/
__global__ void relu(const float* __restrict__ x, float* __restrict__ y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = fmaxf(x[i], 0.f);
    }
}

void relu_launch(const float* x, float* y, int n, cudaStream_t stream) {
    relu<<<cdiv(n, 256 * 4), 256, 0, stream>>>(x, y, n);
}
