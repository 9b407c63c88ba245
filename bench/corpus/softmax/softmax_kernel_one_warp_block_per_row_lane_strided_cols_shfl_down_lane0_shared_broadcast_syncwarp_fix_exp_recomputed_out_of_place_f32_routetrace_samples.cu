// Row softmax as RouteTrace's CUDA_Kernel_Samples writes it (RouteTrace/CUDA_Kernel_Samples,
// reduce/softmax_matrix/softmax_matrix.cu softmax_kernel; a collection of hand-written CUDA practice kernels, this
// one modelled on its sgemv_k32 warp-per-row pattern): fp32, OUT OF PLACE, [M, N] row-major, softmax over each row.
// One block of ONE warp per row (grid M, block 32 = warpSize, hard-coded by the host), lane l handles columns
// i * warpSize + l for i < CEIL(N, warpSize) with a bounds test; the max (seeded -FLT_MAX, fmaxf) and then the sum of
// expf(x - max) are reduced by __shfl_down_sync over 16 .. 1, so only lane 0 holds each result and broadcasts it
// through a __shared__ float (s_max_val, s_sum); the third pass recomputes expf(x - max) from the input and divides
// by the sum (no exponentials kept). Argument order (input, output, M, N); CEIL macro from its utils.cuh.
// Fixed: lane 0 wrote s_max_val / s_sum and the other lanes read them with no barrier in between (a race: with
// independent thread scheduling a lane may read the shared value before it is written); a __syncwarp() now follows
// each write. Changed: main()'s host buffers, timing and verification replaced by a launcher with device pointers
// and a stream. Sizes: 8192 x 4096, decode vocab 4 x 32000, tail 999 x 1001.
// atol 1e-6: the outputs are probabilities of ~1 / N, far below the default absolute tolerance.
#include <cuda_runtime.h>
#include <float.h>

#define CEIL(a, b) ((a + b - 1) / (b))

/* kerntune:
args  = ["input: in f32[M * N]", "output: out f32[M * N]", "M: i32 = M", "N: i32 = N"]
sizes = [{ M = 8192, N = 4096 }, { M = 4, N = 32000 }, { M = 999, N = 1001 }]
grid  = "M"
block = 32
atol  = 1e-6
*/
__global__ void softmax_kernel(float* input, float* output, int M, int N) {
    __shared__ float s_max_val;
    __shared__ float s_sum;
    int laneId = threadIdx.x % warpSize;
    int row = blockIdx.x;  // one row per block (one warp)
    if (row >= M) return;

    int iteration = CEIL(N, warpSize);  // columns per lane

    // row max
    float max_val = -FLT_MAX;
    for (int i = 0; i < iteration; i++) {
        int col = i * warpSize + laneId;
        max_val = (col < N) ? fmaxf(max_val, input[row * N + col]) : max_val;
    }
    for (int offset = warpSize >> 1; offset > 0; offset >>= 1) {
        max_val = fmaxf(max_val, __shfl_down_sync(0xFFFFFFFF, max_val, offset));
    }
    if (laneId == 0) s_max_val = max_val;  // only lane 0 has the full max
    __syncwarp();

    // row sum of exp(x - max)
    float sum = 0.0f;
    for (int i = 0; i < iteration; i++) {
        int col = i * warpSize + laneId;
        sum += (col < N) ? expf(input[row * N + col] - s_max_val) : 0.0f;
    }
    for (int offset = warpSize >> 1; offset > 0; offset >>= 1) {
        sum += __shfl_down_sync(0xFFFFFFFF, sum, offset);
    }
    if (laneId == 0) s_sum = sum;
    __syncwarp();

    // softmax of the row
    for (int i = 0; i < iteration; i++) {
        int col = i * warpSize + laneId;
        if (col < N) output[row * N + col] = expf(input[row * N + col] - s_max_val) / s_sum;
    }
}

// input, output: [M, N] on the device
void softmax_matrix(float* input, float* output, int M, int N, cudaStream_t stream) {
    int grid_size = M;
    int block_size = 32;
    softmax_kernel<<<grid_size, block_size, 0, stream>>>(input, output, M, N);
}
