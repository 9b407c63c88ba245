// RoPE whose one fp32 table holds, for each position, a full-width cos row and then a full-width sin row (rot_dim
// each, the halves duplicated as rotate_half wants them), read through two pointers into the position's row: the
// sin pointer rot_dim past the cos pointer. bf16 query [tokens, n_heads, head_dim] rotated in place over its first
// rot_dim channels (partial rotary), NeoX halves; positions int32; a block a token, its threads over the pairs.
#include <cuda_bf16.h>

/* kerntune:
args  = ["pos_ids: in i32[tokens] ~ randint(0, 2048)", "q: inout bf16[tokens * n_heads * head_dim]",
         "table: in f32[2048 * 2 * rot]  ~ uniform(-1, 1)", "n_heads: i32 = n_heads", "head_dim: i32 = head_dim",
         "rot_dim: i32 = rot"]
sizes = [{ tokens = 4096, n_heads = 32, head_dim = 128, rot = 96 }, { tokens = 3, n_heads = 8, head_dim = 64, rot = 48 }]
grid  = "tokens"
block = 128
*/
__global__ void rope_table_rows(const int* __restrict__ pos_ids, __nv_bfloat16* __restrict__ q,
                                const float* __restrict__ table, int n_heads, int head_dim, int rot_dim) {
  const int t = blockIdx.x;
  const float* cos_row = table + (long long)pos_ids[t] * (2 * rot_dim);
  const float* sin_row = cos_row + rot_dim;
  const int half = rot_dim / 2;
  for (int p = threadIdx.x; p < n_heads * half; p += blockDim.x) {
    const int h = p / half, i = p % half;
    __nv_bfloat16* x = q + ((long long)t * n_heads + h) * head_dim;
    const float a = __bfloat162float(x[i]), b = __bfloat162float(x[i + half]);
    x[i] = __float2bfloat16(a * cos_row[i] - b * sin_row[i]);
    x[i + half] = __float2bfloat16(b * cos_row[i + half] + a * sin_row[i + half]);
  }
}
