// Parsing fixture — ünïcode comment: αβγ → every construct kerntune reads
#include <cuda_runtime.h>
#define BLOCK 256  // threads per block
#define EMPTY
constexpr int TILE = 32;

template <typename T, int VEC = 4>
__global__ void __launch_bounds__(256, 2) copy_vec(const T* __restrict__ x, T* __restrict__ y, int n) {
    __shared__ float s[BLOCK];  // 日本語
    #pragma unroll 4
    for (int i = 0; i < VEC; i++) y[i] = x[i];
    #pragma unroll
    for (int j = 0; j < 4; j++) s[j] = 0.f;
}

extern "C" __global__ void scale(float *a, const float * const b, float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = alpha * b[i];
}

__device__ float helper(float x) { return x; }

void launch(float* x, float* y, int n, cudaStream_t stream) {
    int threads = 256;
    const int B = 128;
    dim3 grid((n + threads - 1) / threads, 2);
    copy_vec<float, 4><<<grid, threads, 0, stream>>>(x, y, n);
    {
        int inner = 64;
        scale<<<(n + B - 1) / B, B>>>(x, y, 2.0f, n);
    }
    scale<<<dim3(n / TILE), dim3(TILE), TILE * sizeof(float)>>>(x, y, 1.0f, n);
}
