// RoPE as xai-org/grok-1 applies it (model.py: RotaryEmbedding.__call__ with rotate_half, called by
// MultiHeadAttention on the key heads and then on the query heads with offset = kv_memory.step), a JAX function
// written here as the CUDA kernel its XLA fusion would be, bf16 activations:
//   x, out [B, T, H, D] (batch, sequence, heads, key_size; seq_dim = 1), OUT OF PLACE (JAX is functional);
//   offset int32 [B]: one cache step per batch element (kv_memory.step), position t = s + offset[b] as fp32
//   (jnp.arange(T, float32) + offset); the phase is built ON THE FLY, no cos/sin cache:
//     inv_freq[j] = 1 / base_exponent ** (2j / D) (fp32, base_exponent = 10000)
//     phase = einsum("bi,j->bij", t, inv_freq), TILED to D: jnp.tile(phase, (1, 2)), so channel d uses j = d % (D/2)
//     out = x * cos(phase) + rotate_half(x) * sin(phase), rotate_half(x) = concat(-x2, x1) (NeoX halves)
//   bf16 * fp32 promotes to fp32 in JAX, so the math is fp32 with ONE rounding at .astype(fprop_dtype)
//   launch (ours, the shape of an XLA elementwise fusion): one output element per thread over the flat int64 index
//   of B * T * H * D, 256 threads, grid ceil(n / 256); each thread reads its own channel and its rotate_half
//   partner and recomputes the phase (powf, cosf, sinf); stream argument
// The launcher is called once for the key heads and once for the query heads (48 query heads of 128 in Grok-1, 8
// key heads); the spec's sets use the query heads. No bug found.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

/* kerntune:
args  = ["out: out bf16[B * T * H * D]", "x: in bf16[B * T * H * D]", "offset: in i32[B] ~ randint(0, 4096)",
         "seq_len: i32 = T", "num_heads: i32 = H", "dim: i32 = D", "base_exponent: f32 = 10000.0",
         "n: i64 = B * T * H * D"]
sizes = [{ B = 4, T = 2048, H = 48, D = 128 }, { B = 4, T = 1, H = 48, D = 128 },
         { B = 3, T = 333, H = 7, D = 80 }]
grid  = "cdiv(B * T * H * D, 256)"
block = 256
*/
__global__ void rotary_embedding_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ x,
                                        const int* __restrict__ offset, int seq_len, int num_heads, int dim,
                                        float base_exponent, int64_t n) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;

    const int d = (int)(idx % dim);
    const int64_t token = idx / dim / num_heads;  // b * seq_len + s
    const int s = (int)(token % seq_len);
    const int b = (int)(token / seq_len);

    const int half_dim = dim / 2;
    const int j = d % half_dim;  // jnp.tile(phase, (1, 2))

    // exponents = arange(0, dim, 2); inv_freq = 1 / base ** (exponents / dim)
    const float inv_freq = 1.0f / powf(base_exponent, (float)(2 * j) / (float)dim);
    const float t = (float)s + (float)offset[b];
    const float phase = t * inv_freq;

    const float xv = __bfloat162float(x[idx]);
    // rotate_half: concat(-x2, x1)
    const float rot = d < half_dim ? -__bfloat162float(x[idx + half_dim]) : __bfloat162float(x[idx - half_dim]);

    out[idx] = __float2bfloat16(xv * cosf(phase) + rot * sinf(phase));
}

// x, out: device [batch, seq_len, num_heads, dim] bf16; offset: device int32 [batch] (the cache step of each batch
// element). dim even.
void rotary_embedding(__nv_bfloat16* out, const __nv_bfloat16* x, const int* offset, int batch, int seq_len,
                      int num_heads, int dim, float base_exponent, cudaStream_t stream) {
    const int64_t n = (int64_t)batch * seq_len * num_heads * dim;
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    rotary_embedding_kernel<<<(unsigned int)blocks, threads, 0, stream>>>(out, x, offset, seq_len, num_heads, dim,
                                                                          base_exponent, n);
}
