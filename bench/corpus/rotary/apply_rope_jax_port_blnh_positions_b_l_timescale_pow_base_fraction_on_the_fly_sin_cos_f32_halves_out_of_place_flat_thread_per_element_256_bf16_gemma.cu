// RoPE as Gemma writes it (google-deepmind/gemma, gemma/positional_embeddings.py apply_rope, called on the query
// and key projections of every Gemma attention block) ported from JAX to CUDA C++. Activations [B, L, N, H] (batch,
// sequence, heads, head_dim) in bf16, positions [B, L] int32, an integer base_frequency (10000). No cos / sin cache:
// fraction = 2 * j / H, timescale = base_frequency ** fraction, angle = position / timescale are computed in fp32
// from the position for each element (j = the element's index in its half). NeoX halves, the split of
// jnp.split(inputs, 2, axis=-1): first = x1 * cos - x2 * sin, second = x2 * cos + x1 * sin; bf16 * f32 promotes to
// fp32 in JAX, so the whole expression is fp32 and rounded once by out.astype(inputs.dtype). OUT OF PLACE (JAX is
// functional: a new array). Argument order (inputs, positions, base_frequency, out, sizes).
// Changed: the jitted jnp expression (one XLA loop fusion) is written as one flat element-wise kernel, one thread per
// output element over B * L * N * H with a 64-bit index, 256 threads per block (chosen here); each thread recomputes
// its timescale with powf and its sin / cos with sincosf as the fused loop does; scale_factor (later Gemma versions)
// left at 1. No bug found. Sizes: Gemma-7B heads (16 of 256) for 4 sequences of 2048 tokens; 4 decode tokens;
// 3 x 37 tokens x 7 heads of 96. Positions randint(0, 8192).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["inputs: in bf16[B * L * N * H]", "positions: in i32[B * L] ~ randint(0, 8192)", "base_frequency: i32 = 10000",
         "out: out bf16[B * L * N * H]", "batch: i32 = B", "seq_len: i32 = L", "num_heads: i32 = N",
         "head_dim: i32 = H"]
sizes = [{ B = 4, L = 2048, N = 16, H = 256 }, { B = 4, L = 1, N = 16, H = 256 }, { B = 3, L = 37, N = 7, H = 96 }]
grid  = ["cdiv(B * L * N * H, 256)", 1, 1]
block = 256
*/
__global__ void apply_rope_kernel(const __nv_bfloat16* __restrict__ inputs, const int32_t* __restrict__ positions,
                                  const int base_frequency, __nv_bfloat16* __restrict__ out, const int batch,
                                  const int seq_len, const int num_heads, const int head_dim) {
  const int64_t total = (int64_t)batch * seq_len * num_heads * head_dim;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;

  const int half = head_dim / 2;
  const int h = (int)(idx % head_dim);
  const int64_t bl = idx / ((int64_t)num_heads * head_dim);  // b * seq_len + l
  const int j = h < half ? h : h - half;

  // fraction = 2 * arange(head_dim // 2) / head_dim; timescale = base_frequency ** fraction
  const float fraction = (float)(2 * j) / (float)head_dim;
  const float timescale = powf((float)base_frequency, fraction);
  const float sinusoid_inp = (float)positions[bl] / timescale;
  float sin_v, cos_v;
  sincosf(sinusoid_inp, &sin_v, &cos_v);

  const int64_t head_base = idx - h;
  const float first_half = __bfloat162float(inputs[head_base + j]);
  const float second_half = __bfloat162float(inputs[head_base + j + half]);
  float r;
  if (h < half) {
    r = first_half * cos_v - second_half * sin_v;  // first_part
  } else {
    r = second_half * cos_v + first_half * sin_v;  // second_part
  }
  out[idx] = __float2bfloat16(r);
}

// inputs, out: [batch, seq_len, num_heads, head_dim] bf16; positions: [batch, seq_len] int32 (device pointers).
void apply_rope(const __nv_bfloat16* inputs, const int32_t* positions, int base_frequency, __nv_bfloat16* out,
                int batch, int seq_len, int num_heads, int head_dim, cudaStream_t stream) {
  const int64_t total = (int64_t)batch * seq_len * num_heads * head_dim;
  const int threads = 256;
  const dim3 grid((unsigned)((total + threads - 1) / threads));
  apply_rope_kernel<<<grid, threads, 0, stream>>>(inputs, positions, base_frequency, out, batch, seq_len, num_heads,
                                                  head_dim);
}
