// Sampler logits processing: the repetition, frequency and presence penalties of OpenAI-style sampling parameters
// applied in place to fp32 logits [num_seqs, vocab_size], per request (vLLM's sampler contract, repetition penalty as
// its CUDA kernel tiles it):
//   seen  = prompt_mask[t] || output_counts[t] > 0
//   logit = seen ? (logit > 0 ? logit / repetition_penalty : logit * repetition_penalty) : logit
//   logit -= frequency_penalty * output_counts[t] + presence_penalty * (output_counts[t] > 0)
// prompt_mask a bool [num_seqs, vocab_size] (the prompt's tokens), output_counts int32 [num_seqs, vocab_size] (how
// often each token was generated so far), the three penalties fp32 [num_seqs].
// Launch: 2-D grid (num_seqs, tile_num), one block per (sequence, vocab tile), the tile count chosen so that the
// launch has about two blocks per SM (tile_num = min(ceil(vocab / 256), max(1, ceil(2 * 132 / num_seqs))), 132 SMs
// a constant), tile_size = ceil(vocab / tile_num) passed to the kernel, block = min(tile_size, 1024) threads striding
// over their tile, int64 element index.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

namespace sampler {

constexpr int kNumSMs = 132;
constexpr int kBlocksPerSM = 2;
constexpr int kMinTile = 256;
constexpr int kMaxThreads = 1024;

/* kerntune:
args  = ["logits: inout f32[num_seqs * vocab_size]", "prompt_mask: in u8[num_seqs * vocab_size] ~ randint(0, 2)",
         "output_counts: in i32[num_seqs * vocab_size] ~ randint(0, 3)",
         "repetition_penalties: in f32[num_seqs] ~ uniform(1.0, 1.5)",
         "frequency_penalties: in f32[num_seqs] ~ uniform(0.0, 0.5)",
         "presence_penalties: in f32[num_seqs] ~ uniform(0.0, 0.5)",
         "num_seqs: i32 = num_seqs", "vocab_size: i32 = vocab_size",
         "tile_size: i32 = cdiv(vocab_size, min(cdiv(vocab_size, 256), max(1, cdiv(264, num_seqs))))"]
sizes = [{ num_seqs = 256, vocab_size = 128256 }, { num_seqs = 4, vocab_size = 151936 },
         { num_seqs = 7, vocab_size = 32001 }]
grid  = ["num_seqs", "min(cdiv(vocab_size, 256), max(1, cdiv(264, num_seqs)))"]
block = "min(cdiv(vocab_size, min(cdiv(vocab_size, 256), max(1, cdiv(264, num_seqs)))), 1024)"
*/
__global__ void apply_penalties_kernel(float* __restrict__ logits, const bool* __restrict__ prompt_mask,
                                       const int* __restrict__ output_counts,
                                       const float* __restrict__ repetition_penalties,
                                       const float* __restrict__ frequency_penalties,
                                       const float* __restrict__ presence_penalties, const int num_seqs,
                                       const int vocab_size, const int tile_size) {
  const int seq_idx = blockIdx.x;
  if (seq_idx >= num_seqs) return;
  const int tile_start = blockIdx.y * tile_size;
  const int tile_end = min(tile_start + tile_size, vocab_size);

  const float repetition = repetition_penalties[seq_idx];
  const float frequency = frequency_penalties[seq_idx];
  const float presence = presence_penalties[seq_idx];

  for (int vocab_idx = tile_start + threadIdx.x; vocab_idx < tile_end; vocab_idx += blockDim.x) {
    const int64_t idx = static_cast<int64_t>(seq_idx) * vocab_size + vocab_idx;
    const int count = output_counts[idx];
    float logit = logits[idx];
    if (prompt_mask[idx] || count > 0) {
      logit = logit > 0.0f ? logit / repetition : logit * repetition;
    }
    logit -= frequency * static_cast<float>(count);
    logit -= presence * (count > 0 ? 1.0f : 0.0f);
    logits[idx] = logit;
  }
}

}  // namespace sampler

// logits: [num_seqs, vocab_size] fp32, in place; prompt_mask: [num_seqs, vocab_size] bool; output_counts:
// [num_seqs, vocab_size] int32; the penalties: [num_seqs] fp32. Device pointers.
void apply_penalties(float* logits, const bool* prompt_mask, const int* output_counts,
                     const float* repetition_penalties, const float* frequency_penalties,
                     const float* presence_penalties, int num_seqs, int vocab_size, cudaStream_t stream) {
  if (num_seqs == 0 || vocab_size == 0) return;
  const int target_blocks = sampler::kNumSMs * sampler::kBlocksPerSM;
  const int tile_num = std::min((vocab_size + sampler::kMinTile - 1) / sampler::kMinTile,
                                std::max(1, (target_blocks + num_seqs - 1) / num_seqs));
  const int tile_size = (vocab_size + tile_num - 1) / tile_num;
  const dim3 grid(num_seqs, tile_num);
  const dim3 block(std::min(tile_size, sampler::kMaxThreads));
  sampler::apply_penalties_kernel<<<grid, block, 0, stream>>>(logits, prompt_mask, output_counts,
                                                              repetition_penalties, frequency_penalties,
                                                              presence_penalties, num_seqs, vocab_size, tile_size);
}
