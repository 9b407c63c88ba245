// Rotary embedding as MegEngine's InferLLM (a lightweight llama.cpp-inspired LLM inference framework; src/kern/gpu/
// kernel_gpu.cu, rope_compute_float<halfmode> behind llm_rope_compute_float, the GPU path of its RoPE op) writes
// it: fp32 q or k of the current step as [seqlen, n_head, head_embd] (token-major, no batch), out of place (dst,
// src). No cos / sin cache and no position ids: the tokens of the step sit at positions n_past + seq, and every
// thread recomputes theta = (position_offset + seq) * powf(theta_scale, rot) with theta_scale = 10000^(-2 / n_rot)
// computed on the host, then sinf / cosf of it. Launch: grid (n_head, seqlen), one thread per rotated pair
// (block n_rot / 2), an early return past n_rot / 2 / n_head / seqlen; template <bool halfmode>: true rotates
// (rot, rot + head_embd / 2) (NeoX / rotate_half, InferLLM's RotMode::ModelRotHalf), false rotates the adjacent
// pair (2 rot, 2 rot + 1) (GPT-J / ggml mode 0, the path its llama models take; spec = false). All sizes uint32_t,
// int offsets, position_offset passed as a float converted to uint32_t as InferLLM does, its cudaHandle replaced
// by a stream. n_rot = head_embd in the sizes: the kernel writes only the rotated channels of dst, so with
// n_rot < head_embd the pass-through channels of an out-of-place dst would be left unwritten (InferLLM's models
// rotate whole heads).
#include <cuda_runtime.h>
#include <assert.h>
#include <math.h>
#include <stdint.h>

namespace inferllm {

enum class RotMode {
    Mode0 = 0,
    Mode1 = 1,
    ModelRotHalf = 2,
};

namespace gpu {

/* kerntune:
args  = ["dst: out f32[seqlen * n_head * head_embd]", "src: in f32[seqlen * n_head * head_embd]",
         "theta_scale: f32 = 0.8659643233600653", "position_offset: u32 = n_past", "n_rot: u32 = head_embd",
         "seqlen: u32 = seqlen", "n_head: u32 = n_head", "head_embd: u32 = head_embd"]
sizes = [{ seqlen = 8192, n_head = 32, head_embd = 128, n_past = 512 },
         { seqlen = 1, n_head = 32, head_embd = 128, n_past = 1000 },
         { seqlen = 333, n_head = 25, head_embd = 128, n_past = 77 }]
grid  = ["n_head", "seqlen"]
block = "head_embd / 2"
template_args = ["false"]
*/
template <bool halfmode>
__global__ void rope_compute_float(
        float* dst, const float* src, float theta_scale, uint32_t position_offset,
        uint32_t n_rot, uint32_t seqlen, uint32_t n_head, uint32_t head_embd) {
    const int rot = threadIdx.x;
    const int head = blockIdx.x;
    const int seq = blockIdx.y;

    if (rot >= n_rot / 2 || head >= n_head || seq >= seqlen) {
        return;
    }

    const float theta = (position_offset + seq) * powf(theta_scale, rot);
    const float sin_theta = sinf(theta);
    const float cos_theta = cosf(theta);

    const int offset = seq * n_head * head_embd + head * head_embd;
    if (halfmode) {
        const int half_embd = head_embd / 2;
        const float x0 = src[offset + rot];
        const float x1 = src[offset + rot + half_embd];
        dst[offset + rot] = x0 * cos_theta - x1 * sin_theta;
        dst[offset + rot + half_embd] = x0 * sin_theta + x1 * cos_theta;
    } else {
        const float x0 = src[offset + 2 * rot];
        const float x1 = src[offset + 2 * rot + 1];
        dst[offset + 2 * rot] = x0 * cos_theta - x1 * sin_theta;
        dst[offset + 2 * rot + 1] = x0 * sin_theta + x1 * cos_theta;
    }
}

// dst, src: device pointers to [seqlen, head, head_embd] fp32; the step's tokens follow n_past cached ones.
void llm_rope_compute_float(
        float* dst, const float* src, uint32_t n_past, uint32_t n_rot, RotMode m,
        uint32_t seqlen, uint32_t head, uint32_t head_embd, cudaStream_t stream) {
    const float theta_scale = powf(10000.0, -2.0f / n_rot);
    const float position_offset = n_past;

    assert(n_rot <= 2048 && "rotary dims exceed 2048");
    assert(n_rot % 2 == 0 && "rotary dims must be even");
    const dim3 block_dims(n_rot / 2, 1, 1);
    const dim3 block_nums(head, seqlen, 1);
    // Mode1 addresses the rows after the n_past cached ones
    if (m == RotMode::Mode1) {
        src = src + n_past * head_embd * head;
        dst = dst + n_past * head_embd * head;
    }
    if (m == RotMode::ModelRotHalf) {
        rope_compute_float<true><<<block_nums, block_dims, 0, stream>>>(
                dst, src, theta_scale, position_offset, n_rot, seqlen, head, head_embd);
    } else {
        rope_compute_float<false><<<block_nums, block_dims, 0, stream>>>(
                dst, src, theta_scale, position_offset, n_rot, seqlen, head, head_embd);
    }
}

}  // namespace gpu
}  // namespace inferllm
