// SiLU-and-multiply as NanoFlow writes it (efeslab/Nanoflow, the intra-device-parallel LLM serving system:
// pipeline/src/small_cuda_operator.cu, silu_and_multiply_kernel behind silu_and_multiply(d_input, d_output, M, N,
// stream), used after the fused up/gate GEMM of its Llama pipeline). fp16 in and out, fp32 math: the GEMM output is
// [M, 2N] row-major, and NanoFlow applies SiLU to the RIGHT half (columns N..2N-1) and multiplies by the LEFT half
// (columns 0..N-1), out[row, col] = half(in[row, col] * silu(in[row, N + col])), silu(x) = x / (1 + expf(-x)),
// one rounding at the store. A 2-D launch with one thread per output element: block dim3(16, 16), threadIdx.x over
// columns and threadIdx.y over rows, grid (ceil(N / 16), ceil(M / 16)), a `row < M && col < N` guard; int indices
// computed as row * 2 * N + col and row * 2 * N + N + col; argument order (input, output, M, N); non-const pointers.
// No bug found (the grid's y extent ceil(M / 16) stays far below 65535 for serving batch sizes).
#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* kerntune:
args  = ["input: in f16[M * 2 * N]", "output: out f16[M * N]", "M: i32 = M", "N: i32 = N"]
sizes = [{ M = 4096, N = 14336 }, { M = 4, N = 11008 }, { M = 999, N = 1375 }]
grid  = ["cdiv(N, 16)", "cdiv(M, 16)"]
block = [16, 16]
*/
__global__ void silu_and_multiply_kernel(half *input, half *output, int M, int N) {
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;

    if (row < M && col < N) {
        const int idx_left = row * 2 * N + col;       // multiplier half
        const int idx_right = row * 2 * N + N + col;  // activated half

        const float right = __half2float(input[idx_right]);
        const float act = right / (1.0f + expf(-right));

        const float left = __half2float(input[idx_left]);
        output[row * N + col] = __float2half(left * act);
    }
}

// d_input: device [M, 2N] (multiplier columns first, then the SiLU input), d_output: [M, N], fp16.
void silu_and_multiply(half *d_input, half *d_output, int M, int N, cudaStream_t stream) {
    dim3 blockSize(16, 16);
    dim3 gridSize((N + blockSize.x - 1) / blockSize.x, (M + blockSize.y - 1) / blockSize.y);
    silu_and_multiply_kernel<<<gridSize, blockSize, 0, stream>>>(d_input, d_output, M, N);
}
