// RoPE as ManagedLlama2 writes it (GilesBathgate/ManagedLlama2, native/rope_kernel.cu rope_kernel, driven from C# by
// src/RoPERotation.cs through ManagedCuda; a .NET Llama-2 inference engine with fp16 activations): fp16, IN PLACE on
// the query row q [n_heads * head_size] and on the key row already written into the layer's KV cache (the C# passes
// key.OffsetPointer(layerOffset + pos * kvDim), rows kv_dim = n_kv_heads * head_size apart). Pairs are the two
// halves of a head, (i, i + head_size / 2) (blockDim.x = head_size / 2 is the partner offset); the frequency is
// recomputed per thread: freq = 1 / powf(theta, ((2 * tid) % head_size) / head_size), angle pos * freq, cosf / sinf,
// fp32 rotation, one rounding to half at each store. One block per query head (grid n_heads), head_size / 2 threads,
// one pair each; q is rotated first, then blocks below n_kv_heads also rotate k (GQA: the other blocks return).
// Argument order (q, k, n_kv_heads, head_size, pos, theta); a device template rope<T> wrapped by a half kernel.
// Changed: the engine rotates one decode token per call (grid = numHeads); here a prefill chunk of tokens rows is
// rotated in one launch, gridDim.y = tokens, token t at position pos + t, its q row gridDim.x * head_size and its k
// row kv_dim further on (the cache rows are consecutive), so the kernel itself needs no new argument; the C# module
// became a C++ launcher with device pointers and a stream. No race or bug found.
// Sizes: 8192 tokens x 32 heads (8 KV) of 128, decode 1 x 32 (8) x 128, tail 999 x 25 (5) x 96; pos 7, theta 1e4.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

template <typename T>
inline __device__ void rope(T* q, T* k, int n_kv_heads, int head_size, int pos, float theta)
{
    // prefill: one token per blockIdx.y (the engine itself launches a single row)
    const int token = blockIdx.y;
    q += (long long)token * gridDim.x * head_size;
    k += (long long)token * n_kv_heads * head_size;
    pos += token;

    const int i = blockIdx.x * head_size + threadIdx.x;
    const int j = i + blockDim.x;

    const int dim = (threadIdx.x * 2) % head_size;
    const float freq = 1.0f / powf(theta, dim / (float)head_size);
    const float angle = pos * freq;
    const float fcr = cosf(angle);
    const float fci = sinf(angle);

    const float q0 = q[i];
    const float q1 = q[j];
    q[i] = q0 * fcr - q1 * fci;
    q[j] = q0 * fci + q1 * fcr;

    if (blockIdx.x >= n_kv_heads) return;  // no key head for this query head

    const float k0 = k[i];
    const float k1 = k[j];
    k[i] = k0 * fcr - k1 * fci;
    k[j] = k0 * fci + k1 * fcr;
}

/* kerntune:
args  = ["q: inout f16[tokens * heads * head_size]", "k: inout f16[tokens * kv_heads * head_size]",
         "n_kv_heads: i32 = kv_heads", "head_size: i32 = head_size", "pos: i32 = 7", "theta: f32 = 10000.0"]
sizes = [{ tokens = 8192, heads = 32, kv_heads = 8, head_size = 128 },
         { tokens = 1, heads = 32, kv_heads = 8, head_size = 128 },
         { tokens = 999, heads = 25, kv_heads = 5, head_size = 96 }]
grid  = ["heads", "tokens", 1]
block = "head_size / 2"
*/
__global__ void rope_kernel(half* q, half* k, int n_kv_heads, int head_size, int pos, float theta)
{
    return rope<half>(q, k, n_kv_heads, head_size, pos, theta);
}

// RoPERotation.Forward: query [tokens, n_heads * head_size], key = the layer's cache rows at positions pos ..
void rope_rotation(half* query, half* key_cache_rows, int n_heads, int n_kv_heads, int head_size, int pos,
                   int tokens, float theta, cudaStream_t stream)
{
    dim3 grid(n_heads, tokens);
    dim3 block(head_size / 2);
    rope_kernel<<<grid, block, 0, stream>>>(query, key_cache_rows, n_kv_heads, head_size, pos, theta);
}
