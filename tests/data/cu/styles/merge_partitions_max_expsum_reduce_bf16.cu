// Second pass of a partitioned (split-KV) decode attention, vLLM paged-attention v2 convention: each partition p of a
// sequence's keys left its output normalized by its own sum of exponentials (tmp_out bf16 [seqs, heads, max_parts,
// head_size]), its max logit and that sum (max_logits, exp_sums fp32 [seqs, heads, max_parts]). Sequence s has
// ceil(seq_lens[s] / PARTITION_SIZE) partitions. The reduce: M = max_p max_logits, w_p = exp_sums[p] * expf(m_p - M),
// out = sum_p tmp_out[p] * w_p * inv with inv = 1 / (sum_p w_p + 1e-6) (__fdividef). One block per (head, sequence),
// the weights in shared memory.
#include <cuda_bf16.h>
#include <cfloat>

constexpr int PARTITION_SIZE = 512;
constexpr int MAX_PARTS = 64;

/* kerntune:
args  = ["out: out bf16[seqs * heads * head_size]",
         "exp_sums: in f32[seqs * heads * parts] ~ uniform(1, 100)",
         "max_logits: in f32[seqs * heads * parts] ~ uniform(-10, 10)",
         "tmp_out: in bf16[seqs * heads * parts * head_size]",
         "seq_lens: in i32[seqs] ~ randint(1, parts * 512 + 1)",
         "max_num_partitions: i32 = parts", "head_size: i32 = head_size"]
sizes = [{ seqs = 16, heads = 32, parts = 16, head_size = 128 }, { seqs = 3, heads = 7, parts = 5, head_size = 80 }]
grid  = ["heads", "seqs"]
block = "128"
*/
__global__ void reduce_partitions(__nv_bfloat16* __restrict__ out, const float* __restrict__ exp_sums,
                                  const float* __restrict__ max_logits, const __nv_bfloat16* __restrict__ tmp_out,
                                  const int* __restrict__ seq_lens, int max_num_partitions, int head_size) {
  __shared__ float w[MAX_PARTS];
  __shared__ float red[32];
  const int head = blockIdx.x, seq = blockIdx.y, heads = gridDim.x;
  const int parts = (seq_lens[seq] + PARTITION_SIZE - 1) / PARTITION_SIZE;
  const size_t row = (size_t)seq * heads + head;
  const float* ml = max_logits + row * max_num_partitions;
  const float* es = exp_sums + row * max_num_partitions;
  const __nv_bfloat16* src = tmp_out + row * max_num_partitions * head_size;
  float m = -FLT_MAX;
  for (int p = threadIdx.x; p < parts; p += blockDim.x) m = fmaxf(m, ml[p]);
  for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
  __syncthreads();
  m = -FLT_MAX;
  for (int i = 0; i < blockDim.x / 32; ++i) m = fmaxf(m, red[i]);
  __syncthreads();
  float s = 0.f;
  for (int p = threadIdx.x; p < parts; p += blockDim.x) {
    const float r = es[p] * expf(ml[p] - m);
    w[p] = r;
    s += r;
  }
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  s = 0.f;
  for (int i = 0; i < blockDim.x / 32; ++i) s += red[i];
  const float inv = __fdividef(1.0f, s + 1e-6f);
  for (int c = threadIdx.x; c < head_size; c += blockDim.x) {
    float acc = 0.f;
    for (int p = 0; p < parts; ++p) acc += __bfloat162float(src[(size_t)p * head_size + c]) * w[p] * inv;
    out[row * head_size + c] = __float2bfloat16(acc);
  }
}

void reduce_partitions_launch(__nv_bfloat16* out, const float* exp_sums, const float* max_logits,
                              const __nv_bfloat16* tmp_out, const int* seq_lens, int num_seqs, int num_heads,
                              int max_num_partitions, int head_size, cudaStream_t stream) {
  reduce_partitions<<<dim3(num_heads, num_seqs), 128, 0, stream>>>(out, exp_sums, max_logits, tmp_out, seq_lens,
                                                                   max_num_partitions, head_size);
}
