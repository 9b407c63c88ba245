// Token embedding lookup under tensor parallelism (Megatron / vLLM VocabParallelEmbedding): each rank holds the
// rows [vocab_start, vocab_end) of the embedding table, weight bf16 [vocab_end - vocab_start, hidden]; a token id
// outside the shard gives a zero row (the all-reduce across ranks then sums in the owning rank's row), an id inside
// it copies row id - vocab_start. input_ids int64 [num_tokens], output bf16 [num_tokens, hidden].
// Launch: one token per block of 256 threads; when hidden % 8 == 0 the row moves in 16-byte float4 packs of 8 bf16
// (the table row read with __ldg), otherwise element by element; the zero rows are written without reading the
// table. Spec bytes: the ids, plus one row read and one row written per token (the table itself is not streamed).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

constexpr int kEmbedThreads = 256;

/* kerntune:
args  = ["output: out bf16[num_tokens * hidden]", "input_ids: in i64[num_tokens] ~ randint(0, 128256)",
         "weight: in bf16[32064 * hidden]", "vocab_start: i64 = 32064", "vocab_end: i64 = 64128",
         "hidden: i32 = hidden"]
sizes = [{ num_tokens = 8192, hidden = 4096 }, { num_tokens = 8, hidden = 8192 }, { num_tokens = 1001, hidden = 2050 }]
grid  = "num_tokens"
block = 256
bytes = "num_tokens * (8 + 4 * hidden)"
*/
__global__ void vocab_parallel_embedding_kernel(__nv_bfloat16* __restrict__ output,
                                                const int64_t* __restrict__ input_ids,
                                                const __nv_bfloat16* __restrict__ weight, const int64_t vocab_start,
                                                const int64_t vocab_end, const int hidden) {
  const int64_t token = blockIdx.x;
  const int64_t id = input_ids[token];
  const bool in_shard = id >= vocab_start && id < vocab_end;
  __nv_bfloat16* out_row = output + token * hidden;
  const __nv_bfloat16* w_row = weight + (in_shard ? (id - vocab_start) * hidden : 0);

  if (hidden % 8 == 0) {
    const int num_packs = hidden / 8;
    float4* out4 = reinterpret_cast<float4*>(out_row);
    const float4* w4 = reinterpret_cast<const float4*>(w_row);
    for (int i = threadIdx.x; i < num_packs; i += blockDim.x) {
      out4[i] = in_shard ? __ldg(w4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  } else {
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
      out_row[i] = in_shard ? w_row[i] : zero;
    }
  }
}

// output: [num_tokens, hidden] bf16; input_ids: [num_tokens] int64; weight: this rank's rows
// [vocab_end - vocab_start, hidden] bf16. Device pointers, 16-byte aligned.
void vocab_parallel_embedding(__nv_bfloat16* output, const int64_t* input_ids, const __nv_bfloat16* weight,
                              int64_t vocab_start, int64_t vocab_end, int num_tokens, int hidden,
                              cudaStream_t stream) {
  if (num_tokens == 0) return;
  vocab_parallel_embedding_kernel<<<num_tokens, kEmbedThreads, 0, stream>>>(output, input_ids, weight, vocab_start,
                                                                          vocab_end, hidden);
}
