// Templatizer fixture: a block reduction through warp shuffles. The warp count is a macro of its own
// (NWARPS = THREADS / 32 written as a number), the spec writes the block size as a literal.
#include <cuda_runtime.h>

#define THREADS 256
#define NWARPS 8

/* kerntune:
args  = ["x: in f32[rows * cols]", "out: out f32[rows]", "cols: i32 = cols"]
sizes = [{ rows = 1024, cols = 4096 }, { rows = 1000, cols = 4099 }]
grid  = "rows"
block = "256"
*/
__global__ void warp_row_sum(const float* __restrict__ x, float* __restrict__ out, int cols) {
    __shared__ float warp_sums[NWARPS];
    const float* row = x + (size_t)blockIdx.x * cols;
    float v = 0.f;
    for (int c = threadIdx.x; c < cols; c += THREADS) v += row[c];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < NWARPS ? warp_sums[lane] : 0.f;
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

void warp_row_sum_launch(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    warp_row_sum<<<rows, THREADS, 0, stream>>>(x, out, cols);
}
