// Rotary embedding as OpenBMB's CPM.cu writes it (src/model/rotary.cuh, rotary_embedding_kernel behind
// RotaryEmbedding<T>::prefill; the MiniCPM inference engine with speculative decoding), fp16, in place, NeoX pairing:
//   q: [num_tokens, num_heads, 2 * half_dim], k: [num_tokens, num_heads_kv, 2 * half_dim], contiguous (separate
//      buffers, no strides), position_ids int32 [num_tokens]
//   inv_freq: float [half_dim], a MODEL WEIGHT loaded from the checkpoint (no cos/sin cache, no theta argument):
//      freq = p * inv_freq[col], cos(freq) / sin(freq) recomputed for every (head, pair) with the accurate cos / sin
//   x[col]' = a * cos - b * sin, x[col + half_dim]' = a * sin + b * cos, a = x[col], b = x[col + half_dim], in float,
//   rounded once by T(...)
// CPM.cu's conventions: one block per token (grid = num_tokens) of a fixed 512 threads, two flat loops striding by
// blockDim.x over (head, pair) = i / half_dim, i % half_dim, first the query heads then the key heads, int offsets
// blockIdx.x * heads * half_dim * 2 + row * half_dim * 2, argument order (num_heads, num_heads_kv, half_dim, inv_freq,
// pos, q, k), the kernel in an anonymous namespace, a templated host function taking CPM.cu's Stream (a struct
// carrying the cudaStream_t, written here with that one member) and launching on stream.stream.
// inv_freq uniform(0, 1) (1 / theta^(2i / d) lies in (0, 1]), positions randint(0, 4096).
#include <cuda_runtime.h>
#include <cuda_fp16.h>

struct Stream {
    cudaStream_t stream;
};

namespace {
/* kerntune:
args  = ["num_heads: i32 = num_heads", "num_heads_kv: i32 = num_heads_kv", "half_dim: i32 = half_dim",
         "inv_freq: in f32[half_dim] ~ uniform(0, 1)", "pos: in i32[num_tokens] ~ randint(0, 4096)",
         "q: inout f16[num_tokens * num_heads * half_dim * 2]",
         "k: inout f16[num_tokens * num_heads_kv * half_dim * 2]"]
sizes = [{ num_tokens = 8192, num_heads = 32, num_heads_kv = 2, half_dim = 64 },
         { num_tokens = 8, num_heads = 32, num_heads_kv = 2, half_dim = 64 },
         { num_tokens = 333, num_heads = 36, num_heads_kv = 36, half_dim = 32 }]
grid  = "num_tokens"
block = 512
template_args = ["__half"]
*/
template<typename T>
__global__ void rotary_embedding_kernel(int num_heads, int num_heads_kv, int half_dim, const float *inv_freq, const int* pos, T* q, T* k) {
    int tid = threadIdx.x;

    int p = pos[blockIdx.x];

    for (int i = tid; i < num_heads * half_dim; i += blockDim.x) {
        int row = i / half_dim;
        int col = i % half_dim;
        int offset = blockIdx.x * num_heads * half_dim * 2 + row * half_dim * 2;
        float freq = p * inv_freq[col];
        float cos_freq = cos(freq), sin_freq = sin(freq);
        float a = float(q[offset + col]);
        float b = float(q[offset + col + half_dim]);
        q[offset + col] = T(a * cos_freq - b * sin_freq);
        q[offset + col + half_dim] = T(a * sin_freq + b * cos_freq);
    }
    for (int i = tid; i < num_heads_kv * half_dim; i += blockDim.x) {
        int row = i / half_dim;
        int col = i % half_dim;
        int offset = blockIdx.x * num_heads_kv * half_dim * 2 + row * half_dim * 2;
        float freq = p * inv_freq[col];
        float cos_freq = cos(freq), sin_freq = sin(freq);
        float a = float(k[offset + col]);
        float b = float(k[offset + col + half_dim]);
        k[offset + col] = T(a * cos_freq - b * sin_freq);
        k[offset + col + half_dim] = T(a * sin_freq + b * cos_freq);
    }
}
}

// q [num_tokens, num_heads, 2 * half_dim], k [num_tokens, num_heads_kv, 2 * half_dim] on the device, rotated in place;
// inv_freq [half_dim] float, pos [num_tokens] int32.
template<typename T>
void rotary_embedding(const Stream& stream, int num_tokens, int num_heads, int num_heads_kv, int half_dim, const float *inv_freq, const int* pos, T* q, T* k) {
    rotary_embedding_kernel<T><<<num_tokens, 512, 0, stream.stream>>>(num_heads, num_heads_kv, half_dim, inv_freq, pos, q, k);
}

template void rotary_embedding<__half>(const Stream&, int, int, int, int, const float*, const int*, __half*, __half*);
