// GPT-J rotary bf16 in place on the query only, the angles from a table of inverse frequencies kept as a model
// weight (Hugging Face's inv_freq buffer, fp32 [head_size / 2]): theta = pos * inv_freq[i], __sincosf; int64
// positions; one warp per (token, head) row, 4 warps a block over a 1-D grid of rows; the pair (2i, 2i + 1).
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["q: inout bf16[T * H * D]", "inv_freq: in f32[D / 2] ~ uniform(0, 1)",
         "position_ids: in i64[T] ~ randint(0, 8192)", "num_tokens: i32 = T", "num_heads: i32 = H",
         "head_size: i32 = D"]
sizes = [{ T = 4096, H = 32, D = 128 }, { T = 7, H = 12, D = 64 }]
grid  = "cdiv(T * H, 4)"
block = 128
*/
__global__ void rope_gptj_inv_freq_rows(__nv_bfloat16* __restrict__ q, const float* __restrict__ inv_freq,
                                        const int64_t* __restrict__ position_ids, int num_tokens, int num_heads,
                                        int head_size) {
  const int r = blockIdx.x * 4 + threadIdx.x / 32;
  if (r >= num_tokens * num_heads) return;
  const int token = r / num_heads;
  const float pos = (float)position_ids[token];
  __nv_bfloat16* row = q + (int64_t)r * head_size;
  for (int i = threadIdx.x % 32; i < head_size / 2; i += 32) {
    float s, c;
    __sincosf(pos * inv_freq[i], &s, &c);
    const float x0 = __bfloat162float(row[2 * i]), x1 = __bfloat162float(row[2 * i + 1]);
    row[2 * i] = __float2bfloat16(x0 * c - x1 * s);
    row[2 * i + 1] = __float2bfloat16(x1 * c + x0 * s);
  }
}
