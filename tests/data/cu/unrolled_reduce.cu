// Templatizer fixture: a tree reduction unrolled by hand for 256 threads. Its literals (128, 64, ...) are
// the block size in disguise, so the block size must stay 256.
#include <cuda_runtime.h>

__global__ void sum256(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float s[256];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * 256 + tid;
    s[tid] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (tid < 128) s[tid] += s[tid + 128];
    __syncthreads();
    if (tid < 64) s[tid] += s[tid + 64];
    __syncthreads();
    if (tid < 32) {
        float v = s[tid] + s[tid + 32];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (tid == 0) out[blockIdx.x] = v;
    }
}

void sum256_launch(const float* x, float* out, int n, cudaStream_t stream) {
    sum256<<<(n + 255) / 256, 256, 0, stream>>>(x, out, n);
}
