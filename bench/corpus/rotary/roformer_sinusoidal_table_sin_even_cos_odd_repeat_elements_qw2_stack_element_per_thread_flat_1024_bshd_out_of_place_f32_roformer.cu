// Rotary position embedding in the style of the original RoFormer (ZhuiyiTechnology/roformer with bert4keras:
// SinusoidalPositionEmbedding(merge_mode='zero') feeding the MultiHeadAttention layer's rotary branch), a CUDA port of
// the Keras expression keeping its layouts, pairing and float32 math:
//   qw [batch, seq_len, heads, head_size] f32 (the projected queries, or keys: the layer applies the same code to
//   qw and kw), output [batch, seq_len, heads, head_size] f32 OUT OF PLACE
//   sinusoidal_pos [seq_len, head_size] f32, one row per position 0 .. seq_len - 1 (no position ids, shared by
//   the batch), sin and cos INTERLEAVED with SIN FIRST (K.stack([sin, cos], -1) reshaped): sin(theta_i) at 2i,
//   cos(theta_i) at 2i + 1
//   cos_pos = repeat_elements(pos[..., 1::2], 2), sin_pos = repeat_elements(pos[..., ::2], 2),
//   qw2 = stack([-qw[..., 1::2], qw[..., ::2]]) reshaped (GPT-J pairs), out = qw * cos_pos + qw2 * sin_pos:
//   ELEMENTWISE, every output element reads its pair partner and its two table entries
//   launch (ours; Keras runs it as TF elementwise ops): one output element per thread, flat int64 index,
//   1024 threads, grid ceil(n / 1024)
// Argument order qw, sinusoidal_pos, output, then the element count, seq_len, heads, head_size. The table is drawn
// uniform(-1, 1). head_size must be even (RoFormer uses 64). No bug found.
#include <cuda_runtime.h>

#include <cstdint>

#define ROPE_THREADS 1024

/* kerntune:
args  = ["qw: in f32[batch * seq_len * heads * head_size]",
         "sinusoidal_pos: in f32[seq_len * head_size] ~ uniform(-1, 1)",
         "output: out f32[batch * seq_len * heads * head_size]", "n: i64 = batch * seq_len * heads * head_size",
         "seq_len: i32 = seq_len", "heads: i32 = heads", "head_size: i32 = head_size"]
sizes = [{ batch = 16, seq_len = 1024, heads = 16, head_size = 64 },
         { batch = 2, seq_len = 8, heads = 12, head_size = 64 },
         { batch = 3, seq_len = 77, heads = 12, head_size = 66 }]
grid  = "cdiv(batch * seq_len * heads * head_size, 1024)"
block = 1024
*/
__global__ void roformer_rotary_kernel(const float* __restrict__ qw, const float* __restrict__ sinusoidal_pos,
                                       float* __restrict__ output, int64_t n, int seq_len, int heads,
                                       int head_size) {
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;

  const int d = (int)(idx % head_size);
  const int t = (int)((idx / ((int64_t)heads * head_size)) % seq_len);
  const float* pos = sinusoidal_pos + (int64_t)t * head_size;

  const int even = d & ~1;
  const float cos_pos = pos[even + 1];  // repeat_elements(pos[..., 1::2], 2)
  const float sin_pos = pos[even];      // repeat_elements(pos[..., ::2], 2)

  // qw2[2i] = -qw[2i + 1], qw2[2i + 1] = qw[2i]
  const float qw2 = (d & 1) ? qw[idx - 1] : -qw[idx + 1];
  output[idx] = qw[idx] * cos_pos + qw2 * sin_pos;
}

// qw, output: device [batch, seq_len, heads, head_size] f32; sinusoidal_pos: device [seq_len, head_size] f32.
void roformer_apply_rotary(const float* qw, const float* sinusoidal_pos, float* output, int batch, int seq_len,
                           int heads, int head_size, cudaStream_t stream) {
  const int64_t n = (int64_t)batch * seq_len * heads * head_size;
  const int64_t blocks = (n + ROPE_THREADS - 1) / ROPE_THREADS;
  roformer_rotary_kernel<<<(unsigned)blocks, ROPE_THREADS, 0, stream>>>(qw, sinusoidal_pos, output, n, seq_len,
                                                                        heads, head_size);
}
