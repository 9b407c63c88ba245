/*
 *  RoPE in the style of Koifish (gruai/koifish, a from-scratch C++/CUDA LLM training framework;
 *  src/Device/CUDA/kernel/rope.cu: CU_rope_v0_<Typ>, "each thread block is responsible for one head"), bf16:
 *    inp, out [B, T, n_head, head_dim] (rows of C = n_head * head_dim; out may be inp, out of place here)
 *    NeoX pairing: element c of the first half with c + head_dim / 2; NO position ids and no cos / sin cache: the
 *    position is the token's index t in its sequence (blockIdx.y), freq = 1 / powf(theta, 2c / rotary_dim),
 *    __sincosf (the fast intrinsic) of t * freq, math in fp32, one rounding per store
 *    grid (B, T, n_head), block head_dim / 2 threads (one per pair, `if (c >= half_hs) return`), int indices with
 *    h_id = (b * T + t) * nHead + j_head; the argument called seq_len carries C (nHead = seq_len / head_dim), as in
 *    Koifish; C is passed too; `seed` and `isBack` kept in the signature (isBack = true runs the inverse rotation
 *    of the backward pass)
 *  Koifish's optional per-head `scale` output (a fused RMS scale of the rotated head through a block reduction) is
 *  left out, and its CU_Float2T<Typ>(x, seed) store, which can round bf16 stochastically, is a plain
 *  round-to-nearest __float2bfloat16 so that results are deterministic. Fixed: the backward branch's second output
 *  was x1 * sin - x2 * cos, the inverse rotation with its sign flipped; it is now x2 * cos - x1 * sin.
 *  The launcher is ours: Koifish calls the kernel from its QKV operator; here a plain function with a stream.
 */
#include <assert.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

template <typename T>
__device__ __forceinline__ T CU_Float2T(const float x, const uint32_t seed);
template <>
__device__ __forceinline__ __nv_bfloat16 CU_Float2T<__nv_bfloat16>(const float x, const uint32_t seed) {
    return __float2bfloat16(x);
}
template <>
__device__ __forceinline__ float CU_Float2T<float>(const float x, const uint32_t seed) {
    return x;
}

/* kerntune:
args  = ["inp: in bf16[B * T * n_head * head_dim]", "out: out bf16[B * T * n_head * head_dim]",
         "seq_len: i32 = n_head * head_dim", "head_dim: i32 = head_dim", "theta: f32 = 10000.0",
         "rotary_dim: i32 = head_dim", "B: i32 = B", "T: i32 = T", "C: i32 = n_head * head_dim", "seed: u32 = 42",
         "isBack: u8 = 0"]
sizes = [{ B = 4, T = 4096, n_head = 32, head_dim = 128 }, { B = 2, T = 16, n_head = 32, head_dim = 128 },
         { B = 3, T = 333, n_head = 20, head_dim = 96 }]
grid  = ["B", "T", "n_head"]
block = "head_dim / 2"
*/
template <typename Typ>
__global__ void CU_rope_v0_(Typ* inp, Typ* out, int seq_len, int head_dim, float theta, int rotary_dim, int B, int T,
                            int C, uint32_t seed, bool isBack = false) {
    int b = blockIdx.x, t = blockIdx.y, j_head = blockIdx.z;
    int c = threadIdx.x, nHead = seq_len / head_dim, h_id = b * T * nHead + t * nHead + j_head;
    int half_hs = head_dim / 2;
    if (c >= half_hs) {
        return;
    }
    // c: the index of the pair inside the head
    float sin_v, cos_v, freq = 1.0f / powf(theta, 2.0f * c / (float)rotary_dim);  //  [1, 1 / theta]
    __sincosf(t * freq, &sin_v, &cos_v);
    int idx1 = h_id * head_dim + c, idx2 = idx1 + half_hs;
    assert(idx2 < B * T * C);
    float x1 = inp[idx1], x2 = inp[idx2], out1, out2;

    if (isBack) {
        out1 = x1 * cos_v + x2 * sin_v, out2 = -x1 * sin_v + x2 * cos_v;
    } else {
        out1 = x1 * cos_v - x2 * sin_v, out2 = x1 * sin_v + x2 * cos_v;
    }
    out[idx1] = CU_Float2T<Typ>(out1, seed + c);
    out[idx2] = CU_Float2T<Typ>(out2, seed + c);
}

// inp, out: [B, T, n_head * head_dim] device buffers (out may equal inp); positions are 0 .. T - 1 in each sequence.
template <typename Typ>
void rope_forward(Typ* inp, Typ* out, int B, int T, int n_head, int head_dim, float theta, uint32_t seed,
                  cudaStream_t stream) {
    assert(head_dim % 2 == 0 && head_dim / 2 <= 1024);
    const int C = n_head * head_dim;
    dim3 blocks(B, T, n_head);
    int threads = head_dim / 2;
    CU_rope_v0_<Typ><<<blocks, threads, 0, stream>>>(inp, out, C, head_dim, theta, head_dim, B, T, C, seed, false);
}

template void rope_forward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, int, int, int, int, float, uint32_t,
                                          cudaStream_t);
template void rope_forward<float>(float*, float*, int, int, int, int, float, uint32_t, cudaStream_t);
