// RoPE as THUDM ChatGLM2 / ChatGLM3 apply it (modeling_chatglm.py: RotaryEmbedding.forward_impl builds
// rope_cache = stack([cos(idx_theta), sin(idx_theta)], -1) and casts it to the model dtype "to mimic the behaviour
// of complex32"; ChatGLMModel gathers it by position_ids and .transpose(0, 1).contiguous(); SelfAttention.forward
// calls apply_rotary_pos_emb(query_layer, rotary_pos_emb) on the views split from the fused QKV projection),
// written as one CUDA kernel:
//   SEQUENCE-FIRST layout: x [sq, b, np, hn] is the query part of mixed_x_layer [sq, b, (np + 2 * g) * hn]
//   (multi-query attention with g = multi_query_group_num groups), a strided view: one (s, b) row every
//   x_row_stride = (np + 2 * g) * hn elements, its first np * hn being the query heads
//   rope_cache [sq, b, rot_dim / 2, 2] fp16: (cos, sin) stored as an adjacent PAIR per frequency, per token and
//   batch (already gathered by position_ids); rot_dim = hn / 2 in ChatGLM2/3 (the cache is built for
//   kv_channels // 2), so only the first half of each head rotates and x[..., rot_dim:] is concatenated unchanged
//   GPT-J style interleaved pairs (x.reshape(sq, -1, np, rot_dim // 2, 2)): for pair (x0, x1) and (c, s)
//     out0 = x0 * c - x1 * s,   out1 = x1 * c + x0 * s
//   in HALF arithmetic like the fp16 torch ops: every product and every sum rounded to fp16 (__hmul_rn keeps nvcc
//   from contracting them into an fma, which torch's separate ops do not do); OUT OF PLACE into a contiguous
//   [sq, b, np, hn] tensor (torch.cat allocates it)
//   launch (ours): 2-D grid (sq, b), one block per (s, b) row, constexpr 128 threads striding the row's np * hn / 2
//   pairs as __half2; argument order (x, rope_cache, out, sizes, row stride); stream argument
// No bug found (hn even, rot_dim even and <= hn, x_row_stride even).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

constexpr int kRotaryThreads = 128;

/* kerntune:
args  = ["x: in f16[SQ * BS * (NP + 2 * G) * HN]", "rope_cache: in f16[SQ * BS * RD] ~ uniform(-1, 1)",
         "out: out f16[SQ * BS * NP * HN]", "np: i32 = NP", "hn: i32 = HN", "rot_dim: i32 = RD",
         "x_row_stride: i32 = (NP + 2 * G) * HN"]
sizes = [{ SQ = 4096, BS = 8, NP = 32, G = 2, HN = 128, RD = 64 }, { SQ = 1, BS = 4, NP = 32, G = 2, HN = 128, RD = 64 },
         { SQ = 333, BS = 3, NP = 7, G = 1, HN = 96, RD = 48 }]
grid  = ["SQ", "BS"]
block = 128
*/
__global__ void apply_rotary_pos_emb_kernel(const half* __restrict__ x, const half* __restrict__ rope_cache,
                                            half* __restrict__ out, int np, int hn, int rot_dim, int x_row_stride) {
    const int s = blockIdx.x;
    const int bi = blockIdx.y;
    const int64_t row = (int64_t)s * gridDim.y + bi;  // [sq, b] row

    const __half2* x_row = reinterpret_cast<const __half2*>(x + row * x_row_stride);
    const __half2* cache_row = reinterpret_cast<const __half2*>(rope_cache + row * rot_dim);  // (cos, sin) pairs
    __half2* out_row = reinterpret_cast<__half2*>(out + row * np * hn);

    const int pairs_per_head = hn / 2;
    const int rot_pairs = rot_dim / 2;
    const int n_pairs = np * pairs_per_head;
    for (int p = threadIdx.x; p < n_pairs; p += kRotaryThreads) {
        const int j = p % pairs_per_head;  // pair within the head
        __half2 v = x_row[p];
        if (j < rot_pairs) {
            const __half2 cs = cache_row[j];
            const half x0 = __low2half(v);
            const half x1 = __high2half(v);
            const half c = __low2half(cs);
            const half sn = __high2half(cs);
            const half o0 = __hsub(__hmul_rn(x0, c), __hmul_rn(x1, sn));
            const half o1 = __hadd(__hmul_rn(x1, c), __hmul_rn(x0, sn));
            v = __halves2half2(o0, o1);
        }
        out_row[p] = v;  // x_pass copied as is
    }
}

// query_layer: device view into mixed_x_layer [sq, b, (np + 2 * g) * hn] fp16 (row stride x_row_stride elements);
// rope_cache: device [sq, b, rot_dim / 2, 2] fp16; out: device [sq, b, np, hn] fp16.
void chatglm_apply_rotary_pos_emb(const half* query_layer, const half* rope_cache, half* out, int sq, int b, int np,
                                  int hn, int rot_dim, int x_row_stride, cudaStream_t stream) {
    const dim3 grid(sq, b);
    const dim3 block(kRotaryThreads);
    apply_rotary_pos_emb_kernel<<<grid, block, 0, stream>>>(query_layer, rope_cache, out, np, hn, rot_dim,
                                                            x_row_stride);
}
