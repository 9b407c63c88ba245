// Rotary embedding as InfiniTensor's RefactorGraph (a graph-level inference compiler for ONNX-style models with
// its own LLM operators; src/04kernel/cuda/src/rope.cu, RoPEKernel behind launchRoPE, the CUDA kernel of its RoPE
// operator) writes it: out of place on input / output [batch, seq_len, num_head, dim_head] (BSHD, contiguous),
// int64 position ids [batch, seq_len], NeoX / rotate_half pairing (channel c < dim_head / 2 pairs with c + half),
// no cos / sin cache: EVERY ELEMENT recomputes its angle pos * powf(theta, -2c' / dim_head) and cos() / sin() of it.
// One thread per element, not per pair: a thread in the first half writes x[c] * cos - x[c + half] * sin, one in
// the second half writes x[c] * cos + x[c - half] * sin. The arithmetic is in T: in[..] * T(cos_freq) rounds
// cos to fp16 and multiplies and adds in half (cuda_fp16's operators), so each output is rounded several times.
// Launch: 3-D grid (batch, seq_len, ceil(dim_model / threads)), threads = min(1024, round_up(dim_model, 32)),
// dim_model = num_head * dim_head, early return past dim_model; unsigned int sizes, the default stream.
// Fixed from RefactorGraph: its kernel hard-coded the base 10000 (launchRoPE took a theta and dropped it), so
// Llama-3-style bases were wrong; theta is passed through here (500000 in the sizes). The batch offset is computed
// in size_t (it was an unsigned product). Positions randint(0, 4096).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

namespace refactor::kernel::cuda {

    inline unsigned int round_up(unsigned int n, unsigned int multiple) {
        return (n + multiple - 1) / multiple * multiple;
    }

    /* kerntune:
    args  = ["dim_model: u32 = n_heads * head_dim", "dim_head: u32 = head_dim",
             "hidden_stride: u32 = seq_len * n_heads * head_dim", "pos_stride: u32 = seq_len",
             "theta: f32 = 500000.0", "pos: in i64[batch * seq_len] ~ randint(0, 4096)",
             "in: in f16[batch * seq_len * n_heads * head_dim]", "out: out f16[batch * seq_len * n_heads * head_dim]"]
    sizes = [{ batch = 2, seq_len = 4096, n_heads = 32, head_dim = 128 },
             { batch = 16, seq_len = 1, n_heads = 32, head_dim = 128 },
             { batch = 3, seq_len = 333, n_heads = 25, head_dim = 80 }]
    grid  = ["batch", "seq_len", "cdiv(n_heads * head_dim, min(1024, cdiv(n_heads * head_dim, 32) * 32))"]
    block = "min(1024, cdiv(n_heads * head_dim, 32) * 32)"
    template_args = ["half"]
    */
    template<class T>
    __global__ static void RoPEKernel(
        unsigned int dim_model,     // dim_model = num_head * dim_head
        unsigned int dim_head,
        unsigned int hidden_stride, // hidden_stride = seq_len * dim_model
        unsigned int pos_stride,    // pos_stride = seq_len
        float theta,
        const int64_t *__restrict__ pos,// (batch, seq_len)
        const T *__restrict__ in,       // (batch, seq_len, num_head, dim_head)
        T *__restrict__ out             // (batch, seq_len, num_head, dim_head)
    ) {
        unsigned int batch_id = blockIdx.x;
        int64_t target_pos = pos[batch_id * pos_stride + blockIdx.y];
        size_t ith = blockIdx.z * blockDim.x + threadIdx.x;
        if (ith >= dim_model)
            return;

        unsigned int col = ith % dim_head;
        size_t offset = (size_t) batch_id * hidden_stride + (size_t) blockIdx.y * dim_model;

        unsigned int half_dim = dim_head / 2;
        if (col < half_dim) {
            float freq = target_pos * powf(theta, -float(col * 2) / dim_head);
            float cos_freq = cos(freq);
            float sin_freq = sin(freq);
            out[offset + ith] =
                in[offset + ith] * T(cos_freq) - in[offset + ith + half_dim] * T(sin_freq);
        } else {
            float freq = target_pos * powf(theta, -float((col - half_dim) * 2) / dim_head);
            float cos_freq = cos(freq);
            float sin_freq = sin(freq);
            out[offset + ith] =
                in[offset + ith] * T(cos_freq) + in[offset + ith - half_dim] * T(sin_freq);
        }
    }

    // input / output: device pointers to [batchSize, seqLen, nHeads, headDim]; posIDs: int64 [batchSize, seqLen].
    void launchRoPE(
        void const *input,
        int64_t const *posIDs,
        void *output,
        unsigned int batchSize,
        unsigned int seqLen,
        unsigned int nHeads,
        unsigned int headDim,
        float theta,
        bool useHalf) {

        unsigned int dimModel = nHeads * headDim;
        unsigned int hiddenStride = seqLen * dimModel;
        unsigned int threads = std::min(1024u, round_up(dimModel, 32));
        dim3 gridDim(batchSize, seqLen, round_up(dimModel, threads) / threads);
        dim3 blockDim(threads, 1, 1);
        if (useHalf) {
            RoPEKernel<<<gridDim, blockDim, 0, 0>>>(
                dimModel,
                headDim,
                hiddenStride,
                seqLen,
                theta,
                reinterpret_cast<const int64_t *>(posIDs),
                reinterpret_cast<const half *>(input),
                reinterpret_cast<half *>(output));

        } else {
            RoPEKernel<<<gridDim, blockDim, 0, 0>>>(
                dimModel,
                headDim,
                hiddenStride,
                seqLen,
                theta,
                reinterpret_cast<const int64_t *>(posIDs),
                reinterpret_cast<const float *>(input),
                reinterpret_cast<float *>(output));
        }
    }
}// namespace refactor::kernel::cuda
