// Templatizer fixture: the block size is a template argument (used by __launch_bounds__, a shared array and
// a tree reduction), next to a vector width; the launch rounds the grid up by their product.
#include <cuda_runtime.h>

template <int THREADS, int VEC>
__global__ void __launch_bounds__(THREADS) chunk_max(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float red[THREADS];
    const int base = (blockIdx.x * THREADS + threadIdx.x) * VEC;
    float m = -INFINITY;
    #pragma unroll
    for (int v = 0; v < VEC; ++v) {
        if (base + v < n) m = fmaxf(m, x[base + v]);
    }
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = red[0];
}

void chunk_max_launch(const float* x, float* out, int n, cudaStream_t stream) {
    const int threads = 128, vec = 2;
    chunk_max<threads, vec><<<(n + threads * vec - 1) / (threads * vec), threads, 0, stream>>>(x, out, n);
}
