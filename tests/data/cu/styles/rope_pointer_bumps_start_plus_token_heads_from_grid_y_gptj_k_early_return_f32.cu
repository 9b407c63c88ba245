// RoPE of a prompt chunk written the llama2.c way: each block moves its own row pointers and start position before
// anything else (`q += ...; k += ...; start += token;`), the query's heads counted only by the launch (gridDim.y), a
// thread a GPT-J pair (2i, 2i + 1) of one head, the angle start * base^(-2i / head_dim) by sincosf; the key rotated
// after the query, only by the blocks of the heads it has (an early return for the others: GQA). fp32, in place.
/* kerntune:
args  = ["q: inout f32[tokens * heads * head_dim]", "k: inout f32[tokens * kv_heads * head_dim]",
         "start: i32 = 5", "n_kv: i32 = kv_heads", "head_dim: i32 = head_dim", "rope_base: f32 = 500000.0"]
sizes = [{ tokens = 2048, heads = 32, kv_heads = 8, head_dim = 128 }, { tokens = 3, heads = 12, kv_heads = 4, head_dim = 64 }]
grid  = ["tokens", "heads"]
block = "head_dim / 2"
*/
__global__ void rope_chunk(float* q, float* k, int start, int n_kv, int head_dim, float rope_base) {
  q += (long long)blockIdx.x * gridDim.y * head_dim;
  k += (long long)blockIdx.x * n_kv * head_dim;
  start += blockIdx.x;
  const int i = threadIdx.x;
  const int h = blockIdx.y;
  float s, c;
  sincosf(start * powf(rope_base, -(float)(2 * i) / head_dim), &s, &c);
  float* qh = q + h * head_dim;
  const float q0 = qh[2 * i], q1 = qh[2 * i + 1];
  qh[2 * i] = q0 * c - q1 * s;
  qh[2 * i + 1] = q0 * s + q1 * c;
  if (h >= n_kv) return;
  float* kh = k + h * head_dim;
  const float k0 = kh[2 * i], k1 = kh[2 * i + 1];
  kh[2 * i] = k0 * c - k1 * s;
  kh[2 * i + 1] = k0 * s + k1 * c;
}
