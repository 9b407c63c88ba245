// RoPE as Lightning-AI litgpt applies it (litgpt/model.py: CausalSelfAttention.forward -> apply_rope on
// q[..., :rope_n_elem] and k[..., :rope_n_elem], then torch.cat with the unrotated rest; cos / sin from
// GPT.rope_cache -> build_rope_cache, gathered per token by batched_index_select(self.cos, 0, input_pos)), written as
// one CUDA kernel over the fused projection:
//   qkv [B, T, (n_head + 2 * n_query_groups) * head_size] bf16, TOKEN-MAJOR, split (query_size, key_size,
//   value_size) along the last dim (q heads first, then the k groups, then v; GQA); q and k are .view(B, T, nh, hs)
//   .transpose(1, 2), so the outputs are HEAD-MAJOR q_out [B, n_head, T, hs] and k_out [B, n_query_groups, T, hs]
//   (torch.cat makes them contiguous); v is not touched
//   cos / sin [max_seq_length, rope_n_elem] fp32 caches (build_rope_cache: theta in fp32, idx_theta.repeat(1, 2), so
//   column c and c + rope_n_elem / 2 hold the same angle), gathered by input_pos [B, T] (int64, the batched-index
//   decode / prefill path)
//   partial rotary: rope_n_elem = rotary_percentage * head_size (Pythia 0.25, phi-2 0.4): rotate_half over the first
//   rope_n_elem channels (x1 = x[:half], x2 = x[half:], rotated = cat(-x2, x1)), channels rope_n_elem..head_size
//   copied; (x * cos) + (rotated * sin) evaluated in fp32 (bf16 x times fp32 cos promotes), ONE rounding by
//   roped.to(dtype=x.dtype); OUT OF PLACE
//   launch (ours): one block per token (b, t), constexpr 256 threads striding the token's
//   (n_head + n_query_groups) * head_size q and k channels of the qkv row (contiguous reads, scattered head-major
//   writes); stream argument
// No bug found (rope_n_elem must be even, as litgpt's cache layout implies for rope_n_elem > 1).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

constexpr int kRopeThreads = 256;

/* kerntune:
args  = ["qkv: in bf16[B * T * (NH + 2 * NG) * HS]", "cos: in f32[4096 * R] ~ uniform(-1, 1)",
         "sin: in f32[4096 * R] ~ uniform(-1, 1)", "input_pos: in i64[B * T] ~ randint(0, 4096)",
         "q_out: out bf16[B * NH * T * HS]", "k_out: out bf16[B * NG * T * HS]", "T: i32 = T",
         "n_head: i32 = NH", "n_query_groups: i32 = NG", "head_size: i32 = HS", "rope_n_elem: i32 = R"]
sizes = [{ B = 8, T = 2048, NH = 32, NG = 8, HS = 128, R = 128 }, { B = 4, T = 1, NH = 32, NG = 32, HS = 80, R = 32 },
         { B = 3, T = 77, NH = 12, NG = 4, HS = 96, R = 24 }]
grid  = "B * T"
block = 256
*/
__global__ void apply_rope_qk_kernel(const __nv_bfloat16* __restrict__ qkv, const float* __restrict__ cos,
                                     const float* __restrict__ sin, const int64_t* __restrict__ input_pos,
                                     __nv_bfloat16* __restrict__ q_out, __nv_bfloat16* __restrict__ k_out, int T,
                                     int n_head, int n_query_groups, int head_size, int rope_n_elem) {
    const int token = blockIdx.x;  // b * T + t
    const int b = token / T;
    const int t = token - b * T;

    const int qkv_width = (n_head + 2 * n_query_groups) * head_size;
    const __nv_bfloat16* x = qkv + (int64_t)token * qkv_width;

    // batched_index_select(self.cos, 0, input_pos): one cache row per token
    const int64_t pos = input_pos[token];
    const float* cos_row = cos + pos * rope_n_elem;
    const float* sin_row = sin + pos * rope_n_elem;
    const int head_size_half = rope_n_elem / 2;

    const int n_qk = (n_head + n_query_groups) * head_size;  // q heads, then k groups
    for (int i = threadIdx.x; i < n_qk; i += kRopeThreads) {
        const int h = i / head_size;
        const int c = i - h * head_size;
        const float xv = __bfloat162float(x[i]);
        float y;
        if (c < rope_n_elem) {
            const int head = i - c;
            const float rotated = c < head_size_half ? -__bfloat162float(x[head + c + head_size_half])
                                                     : __bfloat162float(x[head + c - head_size_half]);
            y = (xv * cos_row[c]) + (rotated * sin_row[c]);
        } else {
            y = xv;  // q[..., rope_n_elem:], concatenated unchanged
        }
        if (h < n_head) {
            q_out[(((int64_t)b * n_head + h) * T + t) * head_size + c] = __float2bfloat16(y);
        } else {
            k_out[(((int64_t)b * n_query_groups + (h - n_head)) * T + t) * head_size + c] = __float2bfloat16(y);
        }
    }
}

// qkv: device [B, T, (n_head + 2 * n_query_groups) * head_size] bf16; cos, sin: device [max_seq_length,
// rope_n_elem] fp32; input_pos: device [B, T] int64; q_out [B, n_head, T, head_size], k_out [B, n_query_groups, T,
// head_size] bf16.
void litgpt_apply_rope_qk(const __nv_bfloat16* qkv, const float* cos, const float* sin, const int64_t* input_pos,
                          __nv_bfloat16* q_out, __nv_bfloat16* k_out, int B, int T, int n_head, int n_query_groups,
                          int head_size, int rope_n_elem, cudaStream_t stream) {
    const dim3 grid(B * T);
    const dim3 block(kRopeThreads);
    apply_rope_qk_kernel<<<grid, block, 0, stream>>>(qkv, cos, sin, input_pos, q_out, k_out, T, n_head,
                                                     n_query_groups, head_size, rope_n_elem);
}
