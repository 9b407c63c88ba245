#define KERNEL __global__
KERNEL void via_macro(float* x) { x[0] = 1.f; }

__global__ void pragma_if(float* x, int n) {
    if (n > 0)
    #pragma unroll 2
        for (int i = 0; i < n; i++) x[i] = 0.f;
}

__global__ void fine(float* x) { x[threadIdx.x] = 0.f; }
