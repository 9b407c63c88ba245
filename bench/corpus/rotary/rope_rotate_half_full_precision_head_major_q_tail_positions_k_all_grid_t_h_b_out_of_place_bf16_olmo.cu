// RoPE as allenai/OLMo applies it (olmo/model.py: RotaryEmbedding.forward(q, k) with get_rotary_embedding,
// rotate_half and apply_rotary_pos_emb, called by OLMoBlock.attention after the heads are transposed), written as
// one CUDA kernel for q and k, bf16 activations with rope_full_precision = True:
//   q [B, H, Tq, hs] and k [B, H, Tk, hs] HEAD-MAJOR (after .transpose(1, 2)); OLMo caches the keys BEFORE rotary
//   (layer_past holds unrotated k), so every step rotates all Tk keys at positions 0 .. Tk - 1 and the Tq queries at
//   the LAST Tq positions (pos_sin[:, :, key_len - query_len : key_len, :])
//   sin / cos of positions = cat(freqs, freqs), freqs = t * inv_freq, inv_freq = 1 / rope_theta ** (arange(0, hs,
//   2) / hs), all fp32 and recomputed per call (no cache, as get_rotary_embedding without its buffer cache)
//   rotate_half over the two halves (x.view(B, nh, T, 2, hs // 2).unbind(-2), cat(-x2, x1)); full precision: q and
//   k upcast to fp32 (q.float()), (t * cos) + (rotate_half(t) * sin) in fp32, ONE rounding back (type_as(q));
//   OUT OF PLACE (q_out, k_out are new tensors)
//   launch (ours): 3-D grid (Tk, H, B), one block per (b, h, key position) of hs threads, one channel per thread;
//   the block also rotates the query row at the same position when that position is among the last Tq; sincosf,
//   powf; stream argument
// No bug found.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

/* kerntune:
args  = ["q_out: out bf16[B * H * Tq * D]", "k_out: out bf16[B * H * Tk * D]", "q: in bf16[B * H * Tq * D]",
         "k: in bf16[B * H * Tk * D]", "query_len: i32 = Tq", "key_len: i32 = Tk", "head_size: i32 = D",
         "rope_theta: f32 = 10000.0"]
sizes = [{ B = 4, H = 32, Tq = 2048, Tk = 2048, D = 128 }, { B = 2, H = 16, Tq = 1, Tk = 37, D = 128 },
         { B = 3, H = 7, Tq = 77, Tk = 333, D = 96 }]
grid  = ["Tk", "H", "B"]
block = "D"
*/
__global__ void olmo_rotary_kernel(__nv_bfloat16* __restrict__ q_out, __nv_bfloat16* __restrict__ k_out,
                                   const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                                   int query_len, int key_len, int head_size, float rope_theta) {
    const int t = blockIdx.x;  // key position
    const int h = blockIdx.y;
    const int b = blockIdx.z;
    const int i = threadIdx.x;  // channel
    const int half = head_size / 2;

    // positions = cat(freqs, freqs): channel i and i + hs/2 share a frequency
    const int j = i < half ? i : i - half;
    const float inv_freq = 1.0f / powf(rope_theta, (float)(2 * j) / (float)head_size);
    float pos_sin, pos_cos;
    sincosf((float)t * inv_freq, &pos_sin, &pos_cos);

    const int nh = gridDim.y;
    // keys: every position
    {
        const int64_t row = (((int64_t)b * nh + h) * key_len + t) * head_size;
        const float x = __bfloat162float(k[row + i]);
        const float r = i < half ? -__bfloat162float(k[row + i + half]) : __bfloat162float(k[row + i - half]);
        k_out[row + i] = __float2bfloat16((x * pos_cos) + (r * pos_sin));
    }
    // queries: the last query_len positions
    const int tq = t - (key_len - query_len);
    if (tq >= 0) {
        const int64_t row = (((int64_t)b * nh + h) * query_len + tq) * head_size;
        const float x = __bfloat162float(q[row + i]);
        const float r = i < half ? -__bfloat162float(q[row + i + half]) : __bfloat162float(q[row + i - half]);
        q_out[row + i] = __float2bfloat16((x * pos_cos) + (r * pos_sin));
    }
}

// q: device [batch, n_heads, query_len, head_size], k: device [batch, n_heads, key_len, head_size] (bf16, head-major;
// key_len >= query_len); q_out, k_out: same shapes. head_size even, at most 1024.
void olmo_apply_rotary(__nv_bfloat16* q_out, __nv_bfloat16* k_out, const __nv_bfloat16* q, const __nv_bfloat16* k,
                       int batch, int n_heads, int query_len, int key_len, int head_size, float rope_theta,
                       cudaStream_t stream) {
    const dim3 grid(key_len, n_heads, batch);
    const dim3 block(head_size);
    olmo_rotary_kernel<<<grid, block, 0, stream>>>(q_out, k_out, q, k, query_len, key_len, head_size, rope_theta);
}
