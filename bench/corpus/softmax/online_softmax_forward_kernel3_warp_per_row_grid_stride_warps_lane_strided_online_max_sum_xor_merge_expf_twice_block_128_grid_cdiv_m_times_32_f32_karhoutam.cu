// Online softmax forward as KarhouTam/cuda-kernels writes it (kernels/softmax/softmax_forward.cu,
// online_softmax_kernel3, the llm.c-dev-style collection of numbered forward kernels behind a benchmark main()).
// fp32 in, fp32 out (out of place), argument order (input, output, M, N) for an [M, N] row-major matrix. One warp per
// row: warpId = threadIdx.x / warpSize, the block's warps take rows warpsPerBlock * blockIdx.x + warpId and then
// stride by the number of warps in the grid (numWarps = warpsPerBlock * gridDim.x). Each lane walks its row with a
// stride of warpSize keeping an ONLINE (max, sum) pair: bigger = fmaxf(max, x), sum = sum * expf(max - bigger) +
// expf(x - bigger); the 32 pairs are merged by an xor butterfly that exchanges max and sum together and rescales the
// smaller side by expf(difference); the final pass recomputes expf(x - max) / sum for every element (the row is read
// twice, exp evaluated twice per element, plain expf and a true division). Launch as the repository's main() does for
// kernel 3: block 128 (its BLOCK_SIZE), grid ceilDiv(M * 32, blockSize), so every row gets its own warp and the
// stride loop runs once; default stream.
// Changed: the host arrays, the CPU reference and the benchmark harness are left out; the launcher takes device
// pointers, sizes and a stream. Fixed: the row offsets m * N were int products (overflow past 2^31 elements, e.g.
// 65536 rows of 32768), now formed in size_t. Sizes: 32768 x 2048 logits, 4 rows over a 32000-entry vocabulary,
// 999 x 1001. atol 1e-6: the probabilities are ~1 / N.
#include <cuda_runtime.h>
#include <math.h>

#define ceilDiv(a, b) (((a) + (b) - 1) / (b))

/* kerntune:
args  = ["input: in f32[M * N]", "output: out f32[M * N]", "M: i32 = M", "N: i32 = N"]
sizes = [{ M = 32768, N = 2048 }, { M = 4, N = 32000 }, { M = 999, N = 1001 }]
grid  = "cdiv(M * 32, 128)"
block = 128
atol  = 1e-6
*/
__global__ void online_softmax_kernel3(float* input, float* output, const int M, const int N) {
    const int tid = threadIdx.x;
    const int warpId = tid / warpSize;
    const int laneId = tid % warpSize;
    const int warpsPerBlock = blockDim.x / warpSize;
    const int numWarps = warpsPerBlock * gridDim.x;
    const int idx = warpsPerBlock * blockIdx.x + warpId;
    for (int m = idx; m < M; m += numWarps) {
        const float* x = input + (size_t)m * N;
        float* const y = output + (size_t)m * N;

        // each lane keeps a running max and a sum rescaled to it
        float maxval = -INFINITY, sum = 0.0f, bigger;
        for (int i = laneId; i < N; i += warpSize) {
            bigger = fmaxf(maxval, x[i]);
            sum = sum * expf(maxval - bigger) + expf(x[i] - bigger);
            maxval = bigger;
        }

        // butterfly: swap (max, sum) with the partner lane and merge the two pairs
        float offsetMax, offsetSum;
        for (int offset = warpSize / 2; offset > 0; offset >>= 1) {
            __syncwarp();
            offsetMax = __shfl_xor_sync(0xFFFFFFFF, maxval, offset);
            offsetSum = __shfl_xor_sync(0xFFFFFFFF, sum, offset);
            if (offsetMax > maxval) {
                sum *= expf(maxval - offsetMax);
                maxval = offsetMax;
            } else {
                offsetSum *= expf(offsetMax - maxval);
            }
            sum += offsetSum;
        }

        for (int i = laneId; i < N; i += warpSize) {
            y[i] = expf(x[i] - maxval) / sum;
        }
    }
}

// Kernel 3 of the softmax_forward benchmark: a warp per row, blockSize threads per block.
void online_softmax_forward3(float* input, float* output, int M, int N, cudaStream_t stream) {
    const int blockSize = 128;
    const int gridSize = ceilDiv(M * 32, blockSize);
    online_softmax_kernel3<<<gridSize, blockSize, 0, stream>>>(input, output, M, N);
}
