// row_sum.cu — the sum of every row of a row-major float matrix, one thread block per row.
// A naive first version: a strided accumulation over the row, then a shared-memory tree reduction.
#include <cuda_runtime.h>

#define BLOCK 128  // threads per block; the reduction below needs a power of two

/* kerntune:
args  = ["x: in f32[rows * cols]", "out: out f32[rows]", "cols: i32 = cols"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 1000, cols = 4099 }]
grid  = "rows"
block = "BLOCK"
atol  = 1e-3  # a different block size sums each row in a different order
*/
__global__ void row_sum(const float* x, float* out, int cols) {
    __shared__ float s[BLOCK];
    const float* row = x + (size_t)blockIdx.x * cols;
    float acc = 0.f;
    #pragma unroll 4
    for (int c = threadIdx.x; c < cols; c += BLOCK) {
        acc += row[c];
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// out[r] = sum over c of x[r * cols + c]
void row_sum_launch(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    row_sum<<<rows, BLOCK, 0, stream>>>(x, out, cols);
}
