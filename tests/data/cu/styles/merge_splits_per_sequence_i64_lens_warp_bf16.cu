// Split-KV decode combine with a per-sequence split count, in the style of vLLM's paged-attention v2 layout but with
// log-sum-exp states: partition p of sequence s covers keys [p * partition_size, (p + 1) * partition_size), so the
// sequence has ceil(seq_lens[s] / partition_size) valid partitions of the max_parts allocated (int64 lengths, the
// partition size an argument). States fp32 [seqs, heads, max_parts, head_size] with natural lse [seqs, heads,
// max_parts]; merged online (m' = max, a = e^(m - m'), b = e^(s - m'), d = d * a + b, o = o * a + v * b) into a bf16
// output [seqs, heads, head_size] and the merged lse m + log(d) [seqs, heads]. One warp a (sequence, head) row, four
// rows a block; no sequence-count argument (the grid's x).
#include <cuda_bf16.h>
#include <cstdint>
#include <cmath>

/* kerntune:
args  = ["out: out bf16[seqs * heads * head_size]", "out_lse: out f32[seqs * heads]",
         "part_out: in f32[seqs * heads * parts * head_size]",
         "part_lse: in f32[seqs * heads * parts] ~ uniform(-4, 12)",
         "seq_lens: in i64[seqs] ~ randint(1, parts * psize + 1)",
         "num_heads: i32 = heads", "max_parts: i32 = parts", "head_size: i32 = head_size",
         "partition_size: i32 = psize"]
sizes = [{ seqs = 8, heads = 32, parts = 16, head_size = 128, psize = 512 },
         { seqs = 3, heads = 5, parts = 3, head_size = 64, psize = 256 }]
grid  = ["seqs", "cdiv(heads, 4)"]
block = 128
*/
__global__ void combine_splits_per_seq(__nv_bfloat16* __restrict__ out, float* __restrict__ out_lse,
                                       const float* __restrict__ part_out, const float* __restrict__ part_lse,
                                       const int64_t* __restrict__ seq_lens, int num_heads, int max_parts,
                                       int head_size, int partition_size) {
  const int lane = threadIdx.x % 32;
  const int seq = blockIdx.x;
  const int head = blockIdx.y * (blockDim.x / 32) + threadIdx.x / 32;
  if (head >= num_heads) return;
  const int64_t len = seq_lens[seq];
  const int parts = (int)((len + partition_size - 1) / partition_size);
  const size_t row = (size_t)seq * num_heads + head;
  const float* lse = part_lse + row * max_parts;
  const float* vals = part_out + row * max_parts * head_size;
  for (int c = lane; c < head_size; c += 32) {
    float m = -INFINITY, d = 0.f, o = 0.f;
    for (int p = 0; p < parts; ++p) {
      const float s = lse[p];
      const float mn = fmaxf(m, s);
      const float a = expf(m - mn), b = expf(s - mn);
      d = d * a + b;
      o = o * a + vals[(size_t)p * head_size + c] * b;
      m = mn;
    }
    out[row * head_size + c] = __float2bfloat16(o / d);
    if (c == 0) out_lse[row] = m + logf(d);
  }
}
