// 2-D axial RoPE of a ViT as timm applies it (timm/models/eva.py EvaAttention.forward with a rope from
// timm/layers/pos_embed_sincos.py RotaryEmbeddingCat: apply_rot_embed_cat, rot; EVA-02 / ViT with rope), the
// slicing, rotation, cat and type_as of q and k written as one CUDA kernel, bf16 activations under autocast:
//   qkv [B, N, 3, H, D] bf16 (the fused qkv Linear output; q, k, v = qkv.reshape(B, N, 3, H, D).permute(2, 0, 3,
//   1, 4).unbind(0) are STRIDED views of it, v is not touched here)
//   rope [N - npt, 2 * D] fp32: sin and cos CONCATENATED on the last dim (emb.tensor_split(2, -1) -> sin_emb,
//   cos_emb), one row per patch, frequencies repeat_interleave'd so that channels 2i and 2i + 1 share one
//   INTERLEAVED pairs: rot(x) = stack([-x[..., 1::2], x[..., ::2]], -1).reshape: rot(x)[2i] = -x[2i + 1],
//   rot(x)[2i + 1] = x[2i]; out = x * cos_emb + rot(x) * sin_emb, both tables read at the element's own channel
//   bf16 * fp32 promotes to fp32, the cat with the untouched prefix promotes to fp32, .type_as(v) rounds ONCE
//   back to bf16; the npt prefix tokens (class token) are copied unchanged (torch.cat([q[:, :, :npt], ...]))
//   q_out, k_out [B, H, N, D] bf16 CONTIGUOUS (the cat makes new tensors): out of place
//   launch (ours): one block per (token, image) on grid (N, B), 256 threads striding over the H * D / 2 channel
//   pairs of q, then of k; int indices; stream
// No bug found.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

constexpr int kRopeThreads = 256;

/* kerntune:
args  = ["q_out: out bf16[B * H * N * D]", "k_out: out bf16[B * H * N * D]", "qkv: in bf16[B * N * 3 * H * D]",
         "rope: in f32[(N - 1) * 2 * D] ~ uniform(-1, 1)", "N: i32 = N", "num_heads: i32 = H", "head_dim: i32 = D",
         "num_prefix_tokens: i32 = 1"]
sizes = [{ B = 128, N = 257, H = 16, D = 64 }, { B = 2, N = 17, H = 16, D = 64 }, { B = 3, N = 325, H = 12, D = 64 }]
grid  = ["N", "B"]
block = 256
*/
__global__ void eva_rot_embed_cat_kernel(__nv_bfloat16* __restrict__ q_out, __nv_bfloat16* __restrict__ k_out,
                                         const __nv_bfloat16* __restrict__ qkv, const float* __restrict__ rope,
                                         int N, int num_heads, int head_dim, int num_prefix_tokens) {
    const int n = blockIdx.x;  // token (prefix tokens first, then patches)
    const int b = blockIdx.y;
    const int C = num_heads * head_dim;
    const int half_pairs = C / 2;
    const __nv_bfloat16* row = qkv + ((size_t)b * N + n) * 3 * C;  // [3, H, D] of this token
    const int p = n - num_prefix_tokens;                            // patch index into the rope table
    const float* sin_emb = rope + (size_t)(p < 0 ? 0 : p) * 2 * head_dim;
    const float* cos_emb = sin_emb + head_dim;

    for (int which = 0; which < 2; ++which) {  // q, then k
        const __nv_bfloat16* x = row + which * C;
        __nv_bfloat16* out = which == 0 ? q_out : k_out;
        for (int j = threadIdx.x; j < half_pairs; j += blockDim.x) {
            const int h = (2 * j) / head_dim;
            const int d = (2 * j) % head_dim;  // even channel of the pair
            const size_t o = (((size_t)b * num_heads + h) * N + n) * head_dim + d;
            const __nv_bfloat16 x0 = x[h * head_dim + d];
            const __nv_bfloat16 x1 = x[h * head_dim + d + 1];
            if (p < 0) {  // prefix token: torch.cat keeps it as it is
                out[o] = x0;
                out[o + 1] = x1;
            } else {
                const float f0 = __bfloat162float(x0);
                const float f1 = __bfloat162float(x1);
                const float y0 = f0 * cos_emb[d] + (-f1) * sin_emb[d];
                const float y1 = f1 * cos_emb[d + 1] + f0 * sin_emb[d + 1];
                out[o] = __float2bfloat16(y0);
                out[o + 1] = __float2bfloat16(y1);
            }
        }
    }
}

// qkv: device [B, N, 3, num_heads, head_dim] bf16; rope: [N - num_prefix_tokens, 2 * head_dim] fp32 (sin | cos);
// q_out, k_out: [B, num_heads, N, head_dim] bf16. head_dim even.
void eva_apply_rot_embed_cat(__nv_bfloat16* q_out, __nv_bfloat16* k_out, const __nv_bfloat16* qkv, const float* rope,
                             int B, int N, int num_heads, int head_dim, int num_prefix_tokens, cudaStream_t stream) {
    const dim3 grid(N, B);
    eva_rot_embed_cat_kernel<<<grid, kRopeThreads, 0, stream>>>(q_out, k_out, qkv, rope, N, num_heads, head_dim,
                                                                num_prefix_tokens);
}
