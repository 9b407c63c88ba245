// Rotary embedding in the style of PyTorch's torchtune (torchtune/modules/position_embeddings.py
// RotaryPositionalEmbeddings: rope_init / build_rope_cache and forward(x, input_pos), the RoPE of its Llama 2/3,
// Mistral and Qwen builders), a CUDA port keeping its layouts and rounding:
//   x [b, s, n_h, h_d] bf16 in, out [b, s, n_h, h_d] bf16 OUT OF PLACE (x_out.type_as(x) is a new tensor)
//   cache [max_seq_len, h_d / 2, 2] f32 with cos and sin INTERLEAVED in the last dim
//   (torch.stack([cos(idx_theta), sin(idx_theta)], dim=-1)), one float2 per pair
//   input_pos [b, s] int64: rope_cache = cache[input_pos], a position per (sample, token) (packed / KV-cached
//   decoding); max_seq_len 4096
//   GPT-J pairing (x.float().reshape(..., -1, 2)): out0 = x0 * cos - x1 * sin, out1 = x1 * cos + x0 * sin, in f32
//   after x.float(), one bf16 rounding at type_as
//   launch (ours; torchtune runs it eagerly): block (h_d / 2, 4): a thread per pair, 4 heads per block; grid
//   (ceil(n_h / 4), s, b); heads past n_h return
// Argument order x, input_pos, cache, out, then seq_len, num_heads, head_dim (forward(x, *, input_pos) with the
// output and the sizes appended). cache is drawn uniform(-1, 1), positions randint(0, 4096). head_dim must be
// even (torchtune asserts it through the reshape). No bug found.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

constexpr int kHeadsPerBlock = 4;

/* kerntune:
args  = ["x: in bf16[b * s * n_h * h_d]", "input_pos: in i64[b * s] ~ randint(0, 4096)",
         "cache: in f32[4096 * h_d] ~ uniform(-1, 1)", "out: out bf16[b * s * n_h * h_d]", "seq_len: i32 = s",
         "num_heads: i32 = n_h", "head_dim: i32 = h_d"]
sizes = [{ b = 2, s = 4096, n_h = 32, h_d = 128 }, { b = 8, s = 1, n_h = 32, h_d = 128 },
         { b = 3, s = 1001, n_h = 5, h_d = 80 }]
grid  = ["cdiv(n_h, 4)", "s", "b"]
block = ["h_d / 2", 4]
*/
__global__ void rope_forward_kernel(const __nv_bfloat16* __restrict__ x, const int64_t* __restrict__ input_pos,
                                    const float* __restrict__ cache, __nv_bfloat16* __restrict__ out, int seq_len,
                                    int num_heads, int head_dim) {
  const int pair = threadIdx.x;  // i in [0, h_d / 2)
  const int head = blockIdx.x * kHeadsPerBlock + threadIdx.y;
  const int tok = blockIdx.y;
  const int bi = blockIdx.z;
  if (head >= num_heads) return;

  const int64_t bs = (int64_t)bi * seq_len + tok;
  const int64_t pos = input_pos[bs];

  // rope_cache[..., i, 0] = cos, rope_cache[..., i, 1] = sin
  const float2 cs = reinterpret_cast<const float2*>(cache + pos * head_dim)[pair];

  const int64_t off = (bs * num_heads + head) * head_dim + 2 * pair;
  const float x0 = __bfloat162float(x[off]);
  const float x1 = __bfloat162float(x[off + 1]);

  out[off] = __float2bfloat16(x0 * cs.x - x1 * cs.y);
  out[off + 1] = __float2bfloat16(x1 * cs.x + x0 * cs.y);
}

// x, out: device [b, s, n_h, h_d] bf16; input_pos: device [b, s] int64; cache: device [max_seq_len, h_d / 2, 2] f32.
void torchtune_rope_forward(const __nv_bfloat16* x, const int64_t* input_pos, const float* cache, __nv_bfloat16* out,
                            int b, int s, int n_h, int h_d, cudaStream_t stream) {
  const dim3 block(h_d / 2, kHeadsPerBlock);
  const dim3 grid((n_h + kHeadsPerBlock - 1) / kHeadsPerBlock, s, b);
  rope_forward_kernel<<<grid, block, 0, stream>>>(x, input_pos, cache, out, s, n_h, h_d);
}
