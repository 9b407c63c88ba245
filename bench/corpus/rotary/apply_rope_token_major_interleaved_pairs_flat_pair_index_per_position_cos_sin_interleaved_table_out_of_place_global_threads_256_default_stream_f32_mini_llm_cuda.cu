// RoPE as mini-llm-cuda writes it (daniel-chermetz/mini-llm-cuda, inference.cu applyRoPE, launched once for the
// queries and once for the keys of a layer by runInference; a from-scratch fp32 CUDA + cuBLAS training and
// inference code base for a small Llama-like model). fp32, OUT OF PLACE (keysOrValuesPostRoPE from keysOrValues),
// activations token-major: the sequence is a dim_ x L_ column-major matrix, i.e. one column of dim_ values per
// token with the heads stacked in it (index = col * dim_ + row), INTERLEAVED (GPT-J) pairs (row, row + 1) rotated
// together. The cos / sin come from a host-precomputed table [maxL, headDim] with the pair's cos and sin
// INTERLEAVED in the slots (2p, 2p + 1) of the token's row (theta = pos * base^(-2p / headDim)); the position is
// the column index itself (the whole sequence is recomputed every step, no position ids). 1-D launch over pairs:
// one thread per pair, index < dim_ / 2 * L_, threadsPerBlock a global int (256), numBlocks rounded up, default
// stream; argument order (out, in, table, headDim_, dim_, L_); x' = cos * x0 - sin * x1, y' = sin * x0 + cos * x1
// in fp32, one rounding.
// Changed: the launch is wrapped in a host function with device pointers and sizes (the original inlines it in
// runInference with the model's #define'd dim / headDim / maxL); the launcher rejects sequences whose element
// count does not fit the kernel's int index (the original never checks; its 768 x 1280 model is far below). No
// other bug found. Sizes: 16384 tokens x 32 heads x 128, decode-sized 4 x 4096, 999 x 7 heads x 96 (335664
// pairs, the last block partly idle).
#include <cuda_runtime.h>
#include <cstdio>

int threadsPerBlock = 256;

/* kerntune:
args  = ["keysOrValuesPostRoPE: out f32[L * dim]", "keysOrValues: in f32[L * dim]",
         "preComputedRopeTheta: in f32[L * headDim] ~ uniform(-1, 1)", "headDim_: i32 = headDim",
         "dim_: i32 = dim", "L_: i32 = L"]
sizes = [{ L = 16384, dim = 4096, headDim = 128 }, { L = 4, dim = 4096, headDim = 128 },
         { L = 999, dim = 672, headDim = 96 }]
grid  = "cdiv(dim / 2 * L, 256)"
block = 256
*/
__global__ void applyRoPE(float* keysOrValuesPostRoPE, float* keysOrValues, float* preComputedRopeTheta, int headDim_, int dim_, int L_) {
    int pairIndex = blockIdx.x * blockDim.x + threadIdx.x;
    if (pairIndex >= dim_ / 2 * L_) {
        return;
    }

    // first element of the pair: column (token) and row (feature) in the dim_ x L_ matrix
    int firstIndex = 2 * pairIndex;
    int colIndex = firstIndex / dim_;
    int rowIndex = firstIndex % dim_;
    int rowInHead = rowIndex % headDim_;

    // the token's table row holds (cos, sin) of each pair side by side
    const float* thetaRow = preComputedRopeTheta + colIndex * headDim_;
    float cosTheta = thetaRow[rowInHead];
    float sinTheta = thetaRow[rowInHead + 1];

    float x0 = keysOrValues[firstIndex];
    float x1 = keysOrValues[firstIndex + 1];
    keysOrValuesPostRoPE[firstIndex] = cosTheta * x0 - sinTheta * x1;
    keysOrValuesPostRoPE[firstIndex + 1] = sinTheta * x0 + cosTheta * x1;
}

// keysOrValues, keysOrValuesPostRoPE: L columns of dim floats; preComputedRopeTheta: at least L rows of headDim.
int applyRoPEToSequence(float* keysOrValuesPostRoPE, float* keysOrValues, float* preComputedRopeTheta, int headDim, int dim, int L) {
    if ((long long)dim * L >= (1LL << 31)) {
        fprintf(stderr, "applyRoPE: %d x %d elements overflow the int index\n", dim, L);
        return -1;
    }
    int dimPairs = dim / 2;
    int xTotalThreads = dimPairs * L;
    int numBlocks = (xTotalThreads + threadsPerBlock - 1) / threadsPerBlock;
    applyRoPE<<<numBlocks, threadsPerBlock>>>(keysOrValuesPostRoPE, keysOrValues, preComputedRopeTheta, headDim, dim, L);
    return 0;
}
