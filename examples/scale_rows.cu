// scale_rows.cu — y[r, c] = x[r, c] * scale[r] for a row-major float matrix.
// Each thread handles VEC consecutive columns of one row (a template argument), under launch bounds.
#include <cuda_runtime.h>

/* kerntune:
args  = ["x: in f32[rows * cols]", "scale: in f32[rows]", "y: out f32[rows * cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 4096 }, { rows = 1000, cols = 4099 }]
grid  = ["(cols + THREADS * VEC - 1) / (THREADS * VEC)", "rows"]
block = "THREADS"
*/
template <int VEC>
__global__ void __launch_bounds__(256) scale_rows(const float* __restrict__ x, const float* __restrict__ scale,
                                                  float* __restrict__ y, int rows, int cols) {
    const int row = blockIdx.y;
    const float s = scale[row];
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    const int base = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    #pragma unroll
    for (int v = 0; v < VEC; ++v) {
        const int c = base + v;
        if (c < cols) yr[c] = xr[c] * s;
    }
}

void scale_rows_launch(const float* x, const float* scale, float* y, int rows, int cols, cudaStream_t stream) {
    const int threads = 256;
    const int vec = 4;
    dim3 grid((cols + threads * vec - 1) / (threads * vec), rows);
    scale_rows<vec><<<grid, threads, 0, stream>>>(x, scale, y, rows, cols);
}
