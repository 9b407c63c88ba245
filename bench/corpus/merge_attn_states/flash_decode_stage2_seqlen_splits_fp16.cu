// Second stage of split-KV flash decoding as lightllm (and SGLang's Triton decode attention, adapted from it) run it,
// ported to CUDA from its Triton program: stage one left, for every (sequence, head) and every BLOCK_SEQ = 256
// tokens of the sequence's KV, a partial output normalized by its own sum, Mid_O fp32 [batch, head_num,
// seq_block_num, head_dim], and its natural-log log-sum-exp, Mid_O_LogExpSum fp32 [batch, head_num, seq_block_num];
// seq_block_num = max_len_in_batch / 256 + 1 is the allocation, but sequence b has only ceil(B_Seqlen[b] / 256)
// valid splits (the number of states to merge differs per sequence and comes from the int32 sequence lengths).
// Merged online, split by split, in fp32 and natural exponentials (expf):
//   m' = max(m, lse_s), acc = acc * e^(m - m') + e^(lse_s - m') * o_s, sum = sum * e^(m - m') + e^(lse_s - m')
//   Out[b, h] = fp16(acc / sum)          (fp16 [batch, head_num, head_dim]; no merged lse written)
// Launch as the Triton grid (batch, head_num), one block per (sequence, head) with one thread per channel
// (block = head_dim, BLOCK_DMODEL lanes), each thread walking the splits of its sequence; every thread reads the
// split's lse itself.
// Spec bytes: the expected traffic for sequence lengths drawn uniformly from 1..max_len (on average about half of
// the allocated splits are read), not the whole allocation.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cmath>
#include <cstdint>

namespace lightllm {

constexpr int kBlockSeq = 256;  // BLOCK_SEQ of stage one

/* kerntune:
args  = ["B_Seqlen: in i32[batch] ~ randint(1, max_len + 1)",
         "Mid_O: in f32[batch * head_num * (max_len / 256 + 1) * head_dim]",
         "Mid_O_LogExpSum: in f32[batch * head_num * (max_len / 256 + 1)] ~ uniform(-4, 12)",
         "Out: out f16[batch * head_num * head_dim]", "seq_block_num: i32 = max_len / 256 + 1",
         "head_dim: i32 = head_dim"]
sizes = [{ batch = 256, head_num = 32, head_dim = 128, max_len = 8192 },
         { batch = 4, head_num = 32, head_dim = 128, max_len = 4096 },
         { batch = 7, head_num = 13, head_dim = 80, max_len = 1000 }]
grid  = ["batch", "head_num"]
block = "head_dim"
bytes = "batch * 4 + batch * head_num * ((max_len / 256 + 1) / 2 + 1) * (head_dim * 4 + 4) + batch * head_num * head_dim * 2"
*/
__global__ void flash_decode_stage2_kernel(const int* __restrict__ B_Seqlen, const float* __restrict__ Mid_O,
                                           const float* __restrict__ Mid_O_LogExpSum, __half* __restrict__ Out,
                                           const int seq_block_num, const int head_dim) {
  const int cur_batch = blockIdx.x;
  const int cur_head = blockIdx.y;
  const int head_num = gridDim.y;
  const int offs_d = threadIdx.x;

  const int cur_batch_seq_len = B_Seqlen[cur_batch];
  const int block_n_size = cur_batch_seq_len <= 0 ? 0 : (cur_batch_seq_len + kBlockSeq - 1) / kBlockSeq;

  float sum_exp = 0.0f;
  float max_logic = -INFINITY;
  float acc = 0.0f;

  const int64_t bh = static_cast<int64_t>(cur_batch) * head_num + cur_head;
  const float* mid_o = Mid_O + bh * seq_block_num * head_dim;
  const float* mid_lse = Mid_O_LogExpSum + bh * seq_block_num;

  for (int block_seq_n = 0; block_seq_n < block_n_size; ++block_seq_n) {
    const float tv = offs_d < head_dim ? mid_o[static_cast<int64_t>(block_seq_n) * head_dim + offs_d] : 0.0f;
    const float tlogic = mid_lse[block_seq_n];
    const float new_max_logic = fmaxf(tlogic, max_logic);
    const float old_scale = expf(max_logic - new_max_logic);
    acc *= old_scale;
    const float exp_logic = expf(tlogic - new_max_logic);
    acc += exp_logic * tv;
    sum_exp = sum_exp * old_scale + exp_logic;
    max_logic = new_max_logic;
  }
  if (offs_d < head_dim) {
    Out[bh * head_dim + offs_d] = __float2half(acc / sum_exp);
  }
}

}  // namespace lightllm

// B_Seqlen: [batch] int32 (>= 1); Mid_O: [batch, head_num, seq_block_num, head_dim] fp32; Mid_O_LogExpSum: [batch,
// head_num, seq_block_num] fp32 natural lse; Out: [batch, head_num, head_dim] fp16. Device pointers.
void flash_decode_stage2(const int* B_Seqlen, const float* Mid_O, const float* Mid_O_LogExpSum, __half* Out,
                         int batch, int head_num, int head_dim, int max_len_in_batch, cudaStream_t stream) {
  const int seq_block_num = max_len_in_batch / lightllm::kBlockSeq + 1;
  const dim3 grid(batch, head_num);
  const dim3 block(head_dim);
  lightllm::flash_decode_stage2_kernel<<<grid, block, 0, stream>>>(B_Seqlen, Mid_O, Mid_O_LogExpSum, Out,
                                                                   seq_block_num, head_dim);
}
