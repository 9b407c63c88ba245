// Rotary embedding as Alibaba MNN's CUDA backend writes it (source/backend/cuda/execution/RoPEExecution.cu,
// ropeC4Kernel, the transformer-fuse RoPE op of MNN-LLM), fp16 build: q and k out of place into qOut and kOut,
// NeoX pairs (d, d + ropeHalfDim) over the first 2 * ropeHalfDim channels of each head, the rest copied (partial
// rotary, MNN's rope_cut_head_dim), cos and sin given PER TOKEN as [seqLen, ropeDim] rows of the storage type
// already gathered by the graph (no position ids), each half of a pair reading its own cos / sin entry (cEven,
// sEven at d and cOdd, sOdd at d + ropeHalfDim):
//   out[d]        = even * cEven - odd * sEven
//   out[d + half] = odd * cOdd  + even * sOdd          fp32 math, one rounding
// The same kernel optionally applies Qwen3's per-head RMSNorm to q and / or k before the rotation (qNorm, kNorm
// run-time flags with fp32 gammas and eps); for a Llama-style model both flags are false, the gammas are never
// read, yet the block still runs its shared-memory sum-of-squares tree over zeros.
// MNN's conventions: camelCase names, one block per (token, head) over q heads then kv heads
// (blocks = seqLen * (numHead + kvNumHead), tokenHead = blockIdx.x), constexpr threads = 128 striding the channels,
// a __shared__ float squareSum[128] halving tree, tensors in MNN's C4-packed hidden layout
// (hiddenPack = UP_DIV(heads * headDim, PACK_NUMBER) * PACK_NUMBER, PACK_NUMBER = 8, the row stride of a token),
// launched on the default stream by the op's onExecute (here a plain host function).
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define PACK_NUMBER 8
#define UP_DIV(x, y) (((x) + (y) - (1)) / (y))

namespace MNN {
namespace CUDA {

/* kerntune:
args  = ["q: in f16[seq_len * round_up(num_heads * head_dim, 8)]",
         "k: in f16[seq_len * round_up(kv_heads * head_dim, 8)]",
         "cos: in f16[seq_len * 2 * rope_half] ~ uniform(-1, 1)",
         "sin: in f16[seq_len * 2 * rope_half] ~ uniform(-1, 1)",
         "qOut: out f16[seq_len * round_up(num_heads * head_dim, 8)]",
         "kOut: out f16[seq_len * round_up(kv_heads * head_dim, 8)]",
         "qGamma: in f32[head_dim]", "kGamma: in f32[head_dim]",
         "seqLen: i32 = seq_len", "numHead: i32 = num_heads", "kvNumHead: i32 = kv_heads", "headDim: i32 = head_dim",
         "ropeHalfDim: i32 = rope_half", "qHiddenPack: i32 = round_up(num_heads * head_dim, 8)",
         "kHiddenPack: i32 = round_up(kv_heads * head_dim, 8)", "qEps: f32 = 1e-6", "kEps: f32 = 1e-6",
         "qNorm: u8 = 0", "kNorm: u8 = 0"]
sizes = [{ seq_len = 8192, num_heads = 32, kv_heads = 8, head_dim = 128, rope_half = 64 },
         { seq_len = 4, num_heads = 32, kv_heads = 8, head_dim = 128, rope_half = 64 },
         { seq_len = 1001, num_heads = 14, kv_heads = 2, head_dim = 80, rope_half = 20 }]
grid  = "seq_len * (num_heads + kv_heads)"
block = 128
template_args = ["half"]
*/
template <typename T>
__global__ void ropeC4Kernel(const T* q, const T* k, const T* cos, const T* sin, T* qOut, T* kOut, const float* qGamma,
                             const float* kGamma, int seqLen, int numHead, int kvNumHead, int headDim, int ropeHalfDim,
                             int qHiddenPack, int kHiddenPack, float qEps, float kEps, bool qNorm, bool kNorm) {
    const int fullHead = numHead + kvNumHead;
    const int tokenHead = blockIdx.x;
    const int token = tokenHead / fullHead;
    const int combinedHead = tokenHead - token * fullHead;
    const bool isQ = combinedHead < numHead;
    const int head = isQ ? combinedHead : combinedHead - numHead;
    const int hiddenPack = isQ ? qHiddenPack : kHiddenPack;
    const T* input = isQ ? q : k;
    T* output = isQ ? qOut : kOut;
    const float* gamma = isQ ? qGamma : kGamma;
    const bool useNorm = isQ ? qNorm : kNorm;
    const float eps = isQ ? qEps : kEps;
    const int base = token * hiddenPack + head * headDim;

    // optional per-head RMSNorm (Qwen3 q_norm / k_norm): sum of squares over the head
    __shared__ float squareSum[128];
    float localSum = 0.0f;
    if (useNorm) {
        for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
            float value = static_cast<float>(input[base + d]);
            localSum += value * value;
        }
    }
    squareSum[threadIdx.x] = localSum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            squareSum[threadIdx.x] += squareSum[threadIdx.x + stride];
        }
        __syncthreads();
    }
    const float scale = useNorm ? rsqrtf(squareSum[0] / static_cast<float>(headDim) + eps) : 1.0f;
    const int ropeDim = ropeHalfDim * 2;
    const int trigBase = token * ropeDim;

    for (int d = threadIdx.x; d < ropeHalfDim; d += blockDim.x) {
        float even = static_cast<float>(input[base + d]);
        float odd = static_cast<float>(input[base + d + ropeHalfDim]);
        if (useNorm) {
            even *= scale * gamma[d];
            odd *= scale * gamma[d + ropeHalfDim];
        }
        const float cEven = static_cast<float>(cos[trigBase + d]);
        const float cOdd = static_cast<float>(cos[trigBase + d + ropeHalfDim]);
        const float sEven = static_cast<float>(sin[trigBase + d]);
        const float sOdd = static_cast<float>(sin[trigBase + d + ropeHalfDim]);
        output[base + d] = static_cast<T>(even * cEven - odd * sEven);
        output[base + d + ropeHalfDim] = static_cast<T>(odd * cOdd + even * sOdd);
    }
    // channels past the rotary part: copied (normalized when the norm is on)
    for (int d = ropeDim + threadIdx.x; d < headDim; d += blockDim.x) {
        float value = static_cast<float>(input[base + d]);
        if (useNorm) {
            value *= scale * gamma[d];
        }
        output[base + d] = static_cast<T>(value);
    }
}

// RoPEExecution::onExecute for an fp16 backend: q [seqLen, numHead * headDim] and k [seqLen, kvNumHead * headDim]
// in the C4-packed layout, cos / sin [seqLen, ropeDim]; device pointers. The gammas may be null when the flags
// are false.
void ropeC4Execute(const half* q, const half* k, const half* cos, const half* sin, half* qOut, half* kOut,
                   const float* qGamma, const float* kGamma, int seqLen, int numHead, int kvNumHead, int headDim,
                   int ropeCutHeadDim, float qEps, float kEps, bool qNorm, bool kNorm) {
    int ropeDim = ropeCutHeadDim;
    if (ropeDim <= 0 || ropeDim > headDim) {
        ropeDim = headDim;
    }
    ropeDim = ropeDim / 2 * 2;
    const int ropeHalfDim = ropeDim / 2;
    const int qHiddenPack = UP_DIV(numHead * headDim, PACK_NUMBER) * PACK_NUMBER;
    const int kHiddenPack = UP_DIV(kvNumHead * headDim, PACK_NUMBER) * PACK_NUMBER;

    constexpr int threads = 128;
    const int blocks = seqLen * (numHead + kvNumHead);
    ropeC4Kernel<half><<<blocks, threads>>>(q, k, cos, sin, qOut, kOut, qGamma, kGamma, seqLen, numHead, kvNumHead,
                                            headDim, ropeHalfDim, qHiddenPack, kHiddenPack, qEps, kEps, qNorm, kNorm);
}

}  // namespace CUDA
}  // namespace MNN
