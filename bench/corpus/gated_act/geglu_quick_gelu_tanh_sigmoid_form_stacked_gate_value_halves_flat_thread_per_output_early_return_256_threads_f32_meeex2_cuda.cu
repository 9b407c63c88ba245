// GeGLU as the Meeex2/cuda "100 days of CUDA" code base writes it (day_017/geglu.cu, geglu_kernel): fp32, the
// input is ONE flat buffer of num_elements floats whose first half is the gate projection and whose second half
// the value projection (two stacked [tokens, inter] GEMM outputs, not interleaved per row), output[idx] =
// gelu(input[idx]) * input[idx + num_elements / 2] over a flat int index, one output element per thread, an
// early return for idx >= num_elements / 2, half_dim recomputed after the guard; the GELU is the sigmoid
// ("quick GELU") approximation x * sigmoid(1.702 x) written through tanhf, x * 0.5 * (1 + tanh(k x)). The stored
// file holds the kernel only; the launcher is a plain one for it: 256 threads, ceil(half / 256) blocks, a stream.
// Fixed: the original used k = 1.702, i.e. x * sigmoid(3.404 x), mixing the quick-GELU constant into the tanh
// form (0.5 * (1 + tanh(z / 2)) = sigmoid(z)); k = 0.851 gives the intended x * sigmoid(1.702 x).
#include <cuda_runtime.h>
#include <cmath>

/* kerntune:
args  = ["input: in f32[2 * tokens * inter]", "output: out f32[tokens * inter]",
         "num_elements: i32 = 2 * tokens * inter"]
sizes = [{ tokens = 4096, inter = 11008 }, { tokens = 4, inter = 14336 }, { tokens = 999, inter = 1375 }]
grid  = "cdiv(tokens * inter, 256)"
block = 256
*/
__global__ void geglu_kernel(const float* input, float* output, int num_elements) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= num_elements / 2) return;
    const int half_dim = num_elements / 2;
    const float x = input[idx];
    const float y = input[idx + half_dim];

    // x * sigmoid(1.702 x) == x * 0.5 * (1 + tanh(0.851 x))
    const float gelu = x * 0.5f * (1.0f + tanhf(0.851f * x));

    output[idx] = gelu * y;
}

// input: device buffer [2, tokens * inter] (gate half, then value half), output: [tokens * inter].
void geglu(const float* input, float* output, int tokens, int inter, cudaStream_t stream) {
    const int num_elements = 2 * tokens * inter;
    const int threads = 256;
    const int blocks = (num_elements / 2 + threads - 1) / threads;
    geglu_kernel<<<blocks, threads, 0, stream>>>(input, output, num_elements);
}
