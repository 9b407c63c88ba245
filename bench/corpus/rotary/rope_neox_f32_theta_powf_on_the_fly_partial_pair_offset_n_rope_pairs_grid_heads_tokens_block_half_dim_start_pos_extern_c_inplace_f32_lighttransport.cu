// NeoX-style RoPE in the style of lighttransport/gemm's CUDA LLM runner (cuda/llm/cuda_llm_runner.c: kernels kept as
// a CUDA C source string compiled at run time with NVRTC inside extern "C", launched through the driver API;
// rope_neox_f32 applied to the F32 q and k vectors of a decoded token), F32 in place:
//   vec [n_tokens, n_heads, head_dim] f32 (the runner keeps activations in F32 whatever the weight type)
//   angles computed on the fly: freq = 1 / powf(freq_base, 2 * j / rope_dim), theta = pos * freq, cosf / sinf
//   partial rotation: n_rope_pairs > 0 rotates only the first n_rope_pairs pairs and the pair partner is
//   j + n_rope_pairs (NOT j + head_dim / 2), with rope_dim = 2 * n_rope_pairs as the frequency denominator (Qwen3.5:
//   64 of 256 dims); n_rope_pairs == 0 (or >= head_dim / 2) rotates the whole head with partner j + head_dim / 2;
//   the unrotated dims are left as they are
//   launch: one block per head (blockIdx.x), head_dim / 2 threads, one pair per thread, early returns for threads
//   past the rotated pairs; argument order (vec, n_heads, head_dim, pos, freq_base, n_rope_pairs)
// Changed: the runner decodes one token per call (grid n_heads); here blockIdx.y is the token of a prefill batch,
// its position pos + blockIdx.y, and its row n_heads * head_dim floats further on. The launcher is a plain C++
// function with <<< >>> and a stream in place of cuLaunchKernel. The full-rotation size sets pass n_rope_pairs =
// head_dim / 2, which the kernel treats like 0 (partner half_dim away, rope_dim = head_dim). No bug found.
#include <cuda_runtime.h>

#include <cstddef>

extern "C" {

/* kerntune:
args  = ["vec: inout f32[T * H * D]", "n_heads: i32 = H", "head_dim: i32 = D", "pos: i32 = 7",
         "freq_base: f32 = 1000000.0", "n_rope_pairs: i32 = NR"]
sizes = [{ T = 8192, H = 32, D = 128, NR = 64 }, { T = 1, H = 16, D = 256, NR = 32 }, { T = 333, H = 7, D = 96, NR = 48 }]
grid  = ["H", "T"]
block = "D / 2"
*/
__global__ void rope_neox_f32(float *vec, int n_heads, int head_dim, int pos,
                              float freq_base, int n_rope_pairs) {
    int h = blockIdx.x;
    if (h >= n_heads) return;
    int j = threadIdx.x;
    int half_dim = head_dim / 2;
    if (j >= half_dim) return;
    /* Only the first n_rope_pairs pairs rotate; the rest stay unchanged */
    if (n_rope_pairs > 0 && j >= n_rope_pairs) return;

    /* Pair partner: n_rope_pairs away for a partial rotation, half_dim away for a full one */
    int pair_off = (n_rope_pairs > 0 && n_rope_pairs < half_dim) ? n_rope_pairs : half_dim;

    /* Frequencies over the rotated width (2 * n_rope_pairs), not over head_dim */
    int rope_dim = (n_rope_pairs > 0) ? 2 * n_rope_pairs : head_dim;
    float freq = 1.0f / powf(freq_base, (float)(2 * j) / (float)rope_dim);
    int t = blockIdx.y;
    float theta = (float)(pos + t) * freq;
    float cos_t = cosf(theta);
    float sin_t = sinf(theta);

    float *v = vec + ((size_t)t * n_heads + h) * head_dim;
    float v0 = v[j];
    float v1 = v[j + pair_off];
    v[j]            = v0 * cos_t - v1 * sin_t;
    v[j + pair_off] = v0 * sin_t + v1 * cos_t;
}

}  // extern "C"

// vec: device [n_tokens, n_heads, head_dim] f32, rotated in place; token t sits at position pos + t.
void cuda_rope_neox_f32(float *vec, int n_tokens, int n_heads, int head_dim, int pos, float freq_base,
                        int n_rope_pairs, cudaStream_t stream) {
    dim3 grid(n_heads, n_tokens);
    dim3 block(head_dim / 2);
    rope_neox_f32<<<grid, block, 0, stream>>>(vec, n_heads, head_dim, pos, freq_base, n_rope_pairs);
}
