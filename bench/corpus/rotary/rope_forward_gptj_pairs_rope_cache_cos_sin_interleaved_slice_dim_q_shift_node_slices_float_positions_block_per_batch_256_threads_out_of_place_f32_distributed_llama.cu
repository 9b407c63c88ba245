// RoPE as distributed-llama's GPU backend writes it (b4rtaz/distributed-llama, src/nn/vulkan/rope-forward-f32-f32.comp,
// the OP_ROPE shader of its Vulkan executor; the rope cache built by nn-core / nn-cpu-ops), ported from GLSL compute
// to CUDA. fp32, OUT OF PLACE x -> y. The model is sliced over nNodes (tensor parallel): a node holds q columns
// [qDimStart, qDimEnd) and k columns [kvDimStart, kvDimStart + kvDim0). The rope cache is [seqLen][sliceDim] fp32 with
// the pair's cos and sin INTERLEAVED (cache[c] = cos, cache[c + 1] = sin) over the node's columns from kvDimStart to
// qDimEnd (sliceDim = qDimEnd - kvDimStart), so k rows read it from column 0 and q rows from qShift = qDimStart -
// kvDimStart. GPT-J pairs (2i, 2i + 1) rotated as a complex product. One workgroup per batch row (the shader's
// gl_GlobalInvocationID.y, dispatch (1, nBatches, 1)), N_THREADS 256 striding the row's pairs; thread 0 reads the
// position (positions are a float pipe, cast to an unsigned index) and publishes the cache offset in shared memory,
// a barrier, then every thread uses it. isQ a uniform flag choosing the q or k slice (one launch each).
// Changed: the per-batch BatchInfo buffer (input / output offsets of each row in its pipe) replaced by row index *
// row size (contiguous pipes); the uniform config block passed as kernel arguments; the sliceRope arithmetic done in
// the host launcher. Fixed: the shader applied the llama3 rope-scaling function scale(), which rescales a FREQUENCY,
// to the rotated output values x0 and x1 when ropeScalingFactor != 1 (the cache already holds the scaled angles, as the
// CPU path has it): dropped, the kernel rotates only. Sizes (all node 1 of 2, q rows): q 4096 / kv 1024 sliced (q rows
// of 2048, qShift 1536, sliceDim 3584) over 16384 tokens; 4 decode tokens of q 8192 / kv 1024 (q rows of 4096,
// qShift 3584, sliceDim 7680); 333 rows of 1000 with q and kv both 2000 wide (MHA: qShift 0, sliceDim 1000, the same
// launch the k rows make). Positions uniform(0, 4095) into a 4096-row cache, cache values uniform(-1, 1).
#include <cuda_runtime.h>
#include <cstdio>

#define N_THREADS 256

// Spec sizes: QD / KVD the model's q / kv widths, NN nodes, this node NI, ISQ = 1 (q rows).
/* kerntune:
args  = ["x: in f32[B * (QD / NN)]", "y: out f32[B * (QD / NN)]", "positions: in f32[B] ~ uniform(0, 4095)",
         "ropeCache: in f32[4096 * (QD / NN * (NI + 1) - KVD / NN * NI)] ~ uniform(-1, 1)", "isQ: i32 = ISQ",
         "qShift: u32 = QD / NN * NI - KVD / NN * NI", "sliceDim: u32 = QD / NN * (NI + 1) - KVD / NN * NI",
         "inputSizeX: u32 = QD / NN"]
sizes = [{ B = 16384, QD = 4096, KVD = 1024, NN = 2, NI = 1, ISQ = 1 },
         { B = 4, QD = 8192, KVD = 1024, NN = 2, NI = 1, ISQ = 1 },
         { B = 333, QD = 2000, KVD = 2000, NN = 2, NI = 1, ISQ = 1 }]
grid  = ["1", "B"]
block = 256
*/
__global__ void ropeForwardF32F32(const float* x, float* y, const float* positions, const float* ropeCache,
                                  int isQ, unsigned int qShift, unsigned int sliceDim, unsigned int inputSizeX) {
    __shared__ unsigned int sharedOffset;

    const unsigned int threadIndex = threadIdx.x;
    const unsigned int batchIndex = blockIdx.y * blockDim.y + threadIdx.y;

    if (threadIndex == 0) {
        unsigned int position = (unsigned int)positions[batchIndex];
        sharedOffset = position * sliceDim;
        if (isQ) {
            sharedOffset += qShift;
        }
    }

    __syncthreads();

    const unsigned int dim = inputSizeX / 2;
    const size_t xOffset = (size_t)batchIndex * inputSizeX;
    const size_t yOffset = (size_t)batchIndex * inputSizeX;

    for (unsigned int i = threadIndex; i < dim; i += N_THREADS) {
        const unsigned int j = i * 2;
        const size_t c = (size_t)sharedOffset + j;

        float fcr = ropeCache[c];
        float fci = ropeCache[c + 1];
        float v0 = x[xOffset + j];
        float v1 = x[xOffset + j + 1];

        float x0 = v0 * fcr - v1 * fci;
        float x1 = v0 * fci + v1 * fcr;

        y[yOffset + j] = x0;
        y[yOffset + j + 1] = x1;
    }
}

struct RopeSlice {
    unsigned int qDim0;
    unsigned int qDimStart;
    unsigned int qDimEnd;
    unsigned int qShift;
    unsigned int kvDim;
    unsigned int kvDim0;
    unsigned int kvDimStart;
    unsigned int sliceDim;
};

static RopeSlice sliceRope(unsigned int qDim, unsigned int kvDim, unsigned int nNodes, unsigned int nodeIndex) {
    RopeSlice s;
    s.qDim0 = qDim / nNodes;
    s.qDimStart = s.qDim0 * nodeIndex;
    s.qDimEnd = s.qDimStart + s.qDim0;
    s.kvDim = kvDim;
    s.kvDim0 = kvDim / nNodes;
    s.kvDimStart = s.kvDim0 * nodeIndex;
    s.qShift = s.qDimStart - s.kvDimStart;
    s.sliceDim = s.qDimEnd - s.kvDimStart;
    return s;
}

// x, y: [nBatches][qDim0 or kvDim0] fp32 rows of this node's q (isQ) or k slice; positions: [nBatches] float;
// ropeCache: [seqLen][sliceDim] interleaved (cos, sin). All device pointers.
int ropeForward(const float* x, float* y, const float* positions, const float* ropeCache, bool isQ,
                unsigned int qDim, unsigned int kvDim, unsigned int nNodes, unsigned int nodeIndex,
                unsigned int nBatches, cudaStream_t stream) {
    RopeSlice slice = sliceRope(qDim, kvDim, nNodes, nodeIndex);
    unsigned int inputSizeX = isQ ? slice.qDim0 : slice.kvDim0;
    if (inputSizeX % 2 != 0 || slice.kvDimStart > slice.qDimStart) {
        fprintf(stderr, "ropeForward: unsupported slice\n");
        return -1;
    }
    dim3 grid(1, nBatches, 1);
    ropeForwardF32F32<<<grid, N_THREADS, 0, stream>>>(x, y, positions, ropeCache, isQ ? 1 : 0, slice.qShift,
                                                      slice.sliceDim, inputSizeX);
    return 0;
}
