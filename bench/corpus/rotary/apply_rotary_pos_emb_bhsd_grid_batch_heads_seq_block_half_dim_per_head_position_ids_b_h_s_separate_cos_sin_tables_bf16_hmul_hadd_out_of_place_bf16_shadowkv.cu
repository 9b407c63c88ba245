// Rotary embedding as ShadowKV writes its CUDA kernel (bytedance/ShadowKV, kernels/rope.cu apply_rotary_pos_emb_kernel
// behind apply_rotary_pos_emb, used when the sparse key chunks it re-fetches are rotated back into place). bf16
// throughout: x [batch, heads, seq, head_dim] (BHSD, addressed through element strides stride_xb / xh / xs, stride_xe
// unused), separate cos and sin tables [max_pos, head_dim] with duplicated halves (Hugging Face cached layout, row
// stride stride_cos / stride_sin), int64 position_ids [batch, heads, seq] addressed by their own three strides (per
// head: ShadowKV gathers different key positions for every kv head), output written OUT OF PLACE with x's strides.
// NeoX pairing (rotate_half): out[i] = x[i] * cos[i] - x[i + half] * sin[i], out[i + half] = x[i + half] *
// cos[i + half] + x[i] * sin[i + half], the arithmetic done in bf16 with __hmul / __hneg / __hadd, so every product and
// the sum are rounded (the default bf16 tolerance kept: two extra roundings stay well inside it). Launch: 3-D grid (batch, heads, seq), one block per (b, h, s) row of half_dim threads, thread t
// rotating the pair (t, t + half_dim); argument order (x, cos, sin, position_ids, output, batch, heads, seq,
// embed_dim, 4 x strides, 2 table strides, 3 position strides, half_dim), default stream.
// Fixed: the row offset b * stride_xb + h * stride_xh + s * stride_xs and the table offset pid * stride_cos were int
// and overflow once a tensor passes 2^31 elements (batch 16 x 32 heads x 32K tokens x 128); they are int64 now.
// Sizes: 8 x 32 x 2048 x 128, decode 4 x 32 x 1 x 128, 3 x 7 x 333 x 96 (48 threads).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["x: in bf16[B * H * S * D]", "cos: in bf16[4096 * D] ~ uniform(-1, 1)", "sin: in bf16[4096 * D] ~ uniform(-1, 1)",
         "position_ids: in i64[B * H * S] ~ randint(0, 4096)", "output: out bf16[B * H * S * D]",
         "batch_size: i32 = B", "heads: i32 = H", "seq_len: i32 = S", "embed_dim: i32 = D",
         "stride_xb: i32 = H * S * D", "stride_xh: i32 = S * D", "stride_xs: i32 = D", "stride_xe: i32 = 1",
         "stride_cos: i32 = D", "stride_sin: i32 = D",
         "stride_pid_b: i32 = H * S", "stride_pid_h: i32 = S", "stride_pid_s: i32 = 1", "half_dim: i32 = D / 2"]
sizes = [{ B = 8, H = 32, S = 2048, D = 128 }, { B = 4, H = 32, S = 1, D = 128 }, { B = 3, H = 7, S = 333, D = 96 }]
grid  = ["B", "H", "S"]
block = "D / 2"
*/
__global__ void apply_rotary_pos_emb_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ cos,
                                            const __nv_bfloat16* __restrict__ sin,
                                            const int64_t* __restrict__ position_ids,
                                            __nv_bfloat16* __restrict__ output, int batch_size, int heads,
                                            int seq_len, int embed_dim, int stride_xb, int stride_xh, int stride_xs,
                                            int stride_xe, int stride_cos, int stride_sin, int stride_pid_b,
                                            int stride_pid_h, int stride_pid_s, int half_dim) {
  const int b = blockIdx.x;
  const int h = blockIdx.y;
  const int s = blockIdx.z;
  const int i = threadIdx.x;  // pair (i, i + half_dim)

  const int64_t pos = position_ids[(int64_t)b * stride_pid_b + (int64_t)h * stride_pid_h + (int64_t)s * stride_pid_s];
  const __nv_bfloat16* cos_row = cos + pos * stride_cos;
  const __nv_bfloat16* sin_row = sin + pos * stride_sin;

  const int64_t row = (int64_t)b * stride_xb + (int64_t)h * stride_xh + (int64_t)s * stride_xs;
  const __nv_bfloat16* src = x + row;
  __nv_bfloat16* dst = output + row;

  if (i < half_dim) {
    const __nv_bfloat16 lo = src[i];
    const __nv_bfloat16 hi = src[i + half_dim];
    // rotate_half(x) = cat(-x_hi, x_lo); both halves of the cached cos / sin rows are read
    dst[i] = __hadd(__hmul(lo, cos_row[i]), __hmul(__hneg(hi), sin_row[i]));
    dst[i + half_dim] = __hadd(__hmul(hi, cos_row[i + half_dim]), __hmul(lo, sin_row[i + half_dim]));
  }
}

// apply_rotary_pos_emb without the torch::Tensor plumbing: device pointers, strides in elements.
void apply_rotary_pos_emb(const __nv_bfloat16* x, const __nv_bfloat16* cos, const __nv_bfloat16* sin,
                          const int64_t* position_ids, __nv_bfloat16* output, int batch_size, int heads, int seq_len,
                          int embed_dim, int stride_xb, int stride_xh, int stride_xs, int stride_xe, int stride_cos,
                          int stride_sin, int stride_pid_b, int stride_pid_h, int stride_pid_s, int half_dim,
                          cudaStream_t stream = 0) {
  const dim3 blocks(batch_size, heads, seq_len);
  const dim3 threads(half_dim);

  apply_rotary_pos_emb_kernel<<<blocks, threads, 0, stream>>>(x, cos, sin, position_ids, output, batch_size, heads,
                                                               seq_len, embed_dim, stride_xb, stride_xh, stride_xs,
                                                               stride_xe, stride_cos, stride_sin, stride_pid_b,
                                                               stride_pid_h, stride_pid_s, half_dim);
}
