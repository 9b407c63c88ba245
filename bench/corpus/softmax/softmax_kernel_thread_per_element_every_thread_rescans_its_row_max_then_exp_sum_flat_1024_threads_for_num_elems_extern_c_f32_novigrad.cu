// Row softmax as novigrad writes it (sebhtml/novigrad, src/devices/cuda/kernels/softmax_kernel.cu softmax_kernel,
// launched by CudaDev::softmax in src/devices/cuda/mod.rs; a from-scratch Rust deep-learning framework whose CUDA
// device compiles its kernels with NVRTC and launches them through cudarc), fp32, OUT OF PLACE, [rows, cols]
// row-major, softmax over each row.
// Style: extern "C", non-const float pointers, argument order (input, output, rows, cols); ONE THREAD PER OUTPUT
// ELEMENT over a flat index (row = idx / cols, col = idx % cols) and no cooperation at all: every thread re-scans
// its whole row twice, once for the max (seeded with the row's first element, fmaxf) and once for the sum of
// expf(x - max), then writes expf(own x - max) / sum. Launch as cudarc's LaunchConfig::for_num_elems(rows * cols):
// 1024 threads, grid ceil(n / 1024), no shared memory.
// No bug found (an earlier softmax.cu of the project, where every thread wrote and then divided the whole row in
// place, raced; this later kernel is the one the device loads). Changed: the Rust launch became a C++ launcher with
// a LaunchConfig struct mirroring cudarc's and a stream argument; int offsets kept (rows * cols < 2^31 here).
// Sizes: 16384 x 1024 (attention rows), decode 4 x 32000 (vocabulary rows), tail 999 x 1001.
#include <cuda_runtime.h>

// Tolerance: the outputs are probabilities of ~1 / cols (down to ~3e-5 over a 32000-wide row), at or below the
// default f32 absolute tolerance, so atol is 1e-6 (the default f32 rtol applies).
/* kerntune:
args  = ["input: in f32[rows * cols]", "output: out f32[rows * cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 16384, cols = 1024 }, { rows = 4, cols = 32000 }, { rows = 999, cols = 1001 }]
grid  = "cdiv(rows * cols, 1024)"
block = 1024
atol  = 1e-6
*/
extern "C" __global__ void softmax_kernel(float *input, float *output, int rows, int cols)
{
    // one thread per element of the [rows, cols] matrix
    int idx = blockIdx.x * blockDim.x + threadIdx.x;

    if (idx >= rows * cols)
    {
        return;
    }

    int row = idx / cols;
    int col = idx % cols;

    // the row maximum, found again by every thread of the row
    float max_val = input[row * cols + 0];
    for (int j = 1; j < cols; j++)
    {
        max_val = fmaxf(max_val, input[row * cols + j]);
    }

    // this thread's own exponential
    float exp_val = expf(input[row * cols + col] - max_val);

    // the row's sum of exponentials, also recomputed by every thread
    float exp_sum = 0.0f;
    for (int j = 0; j < cols; j++)
    {
        exp_sum += expf(input[row * cols + j] - max_val);
    }

    output[row * cols + col] = exp_val / exp_sum;
}

namespace novigrad {

// cudarc's launch configuration for element-wise kernels.
struct LaunchConfig {
    dim3 grid_dim;
    dim3 block_dim;
    unsigned int shared_mem_bytes;

    static LaunchConfig for_num_elems(unsigned int n) {
        const unsigned int NUM_THREADS = 1024;
        const unsigned int num_blocks = (n + NUM_THREADS - 1) / NUM_THREADS;
        return LaunchConfig{dim3(num_blocks, 1, 1), dim3(NUM_THREADS, 1, 1), 0};
    }
};

enum class ErrorEnum { Ok, NvLaunchError };

// CudaDev::softmax: input and output are [rows, cols] device buffers.
ErrorEnum softmax(float* input, float* output, int rows, int cols, cudaStream_t stream) {
    const unsigned int n = static_cast<unsigned int>(rows) * static_cast<unsigned int>(cols);
    const LaunchConfig cfg = LaunchConfig::for_num_elems(n);
    softmax_kernel<<<cfg.grid_dim, cfg.block_dim, cfg.shared_mem_bytes, stream>>>(input, output, rows, cols);
    return cudaGetLastError() == cudaSuccess ? ErrorEnum::Ok : ErrorEnum::NvLaunchError;
}

}  // namespace novigrad
