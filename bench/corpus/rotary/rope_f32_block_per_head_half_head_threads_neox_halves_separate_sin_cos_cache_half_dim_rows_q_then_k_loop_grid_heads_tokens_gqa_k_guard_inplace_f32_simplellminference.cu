// RoPE as SimpleLLMInference writes it (Boundwhd/SimpleLLMInference, source/kernel/cuda/rope_kernel.cu
// rope_f32_kernel behind kernel::rope_kernel_cuda; a small from-scratch C++/CUDA Llama-style engine in the
// KuiperLLama mould). fp32, IN PLACE on q [tokens, hidden_dim] and k [tokens, kv_dim] (heads of head_dim, token
// major). Two separate tables precomputed by its rope_cache_f32_kernel, sin [max_seq_len, head_dim / 2] and cos
// [max_seq_len, head_dim / 2] (sin first in the argument list), indexed pos * head_dim / 2 + tid. NeoX halves: the
// pair is (tid, tid + head_dim / 2). One block per head (grid hidden_dim / head_dim), head_dim / 2 threads, each
// thread one pair; a loop i = 0, 1 over q then k with the same cos / sin, fp32 math, one rounding (none: fp32).
// Argument order (q, k, sin, cos, pos, hidden_dim, kv_dim, head_dim).
// Fixed: the original rotates k for every q head, i.e. it reads and writes k past its end as soon as the model
// has fewer KV heads than query heads (Qwen / Llama GQA); k is now rotated only by the first kv_dim / head_dim
// blocks (kv_dim added to the arguments). Changed: the engine rotates one decode token whose position it reads on
// the host from a pos tensor; here a prefill of tokens rows is rotated at once, gridDim.y = tokens, token t at
// position pos + t and rows hidden_dim / kv_dim apart (token offsets in 64 bits); mem::Tensor arguments replaced
// by device pointers and a stream. Sizes: 8192 tokens x 4096 (32 heads of 128, 8 KV heads), decode 1 token,
// 999 x 2240 (35 heads of 64, 5 KV heads); start position 7, tables of tokens + 7 rows.
#include <cuda_runtime.h>
#include <cstdint>

namespace kernel {

/* kerntune:
args  = ["q: inout f32[tokens * hidden]", "k: inout f32[tokens * kv_dim]",
         "sin: in f32[(tokens + 7) * (head_dim / 2)] ~ uniform(-1, 1)",
         "cos: in f32[(tokens + 7) * (head_dim / 2)] ~ uniform(-1, 1)",
         "pos: i32 = 7", "hidden_dim: i32 = hidden", "kv_dim: i32 = kv_dim", "head_dim: i32 = head_dim"]
sizes = [{ tokens = 8192, hidden = 4096, kv_dim = 1024, head_dim = 128 },
         { tokens = 1, hidden = 4096, kv_dim = 1024, head_dim = 128 },
         { tokens = 999, hidden = 2240, kv_dim = 320, head_dim = 64 }]
grid  = ["hidden / head_dim", "tokens", 1]
block = "head_dim / 2"
*/
__global__ void rope_f32_kernel(float* q, float* k, const float* sin, const float* cos, int32_t pos,
                                int32_t hidden_dim, int32_t kv_dim, int32_t head_dim) {
  int tid = threadIdx.x;
  int head = blockIdx.x;
  int token = blockIdx.y;
  int32_t position = pos + token;

  float fci = *(sin + position * head_dim / 2 + tid);
  float fcr = *(cos + position * head_dim / 2 + tid);

  for (int i = 0; i < 2; i++) {
    if (i == 1 && head * head_dim >= kv_dim) {
      break;  // this head has no key head
    }
    float* vec = (i == 0) ? q + (int64_t)token * hidden_dim : k + (int64_t)token * kv_dim;
    float v0 = *(vec + head * head_dim + tid);
    float v1 = *(vec + head * head_dim + tid + head_dim / 2);
    vec[head * head_dim + tid] = v0 * fcr - v1 * fci;
    vec[head * head_dim + tid + head_dim / 2] = v1 * fcr + v0 * fci;
  }
}

// q [num_tokens, hidden_dim_size], k [num_tokens, kv_dim_size] rotated in place; tokens at positions start_pos ..
void rope_kernel_cuda(float* q, float* k, const float* sin_cache, const float* cos_cache, int32_t start_pos,
                      int32_t num_tokens, int32_t hidden_dim_size, int32_t kv_dim_size, int32_t head_dim,
                      cudaStream_t stream) {
  const int block_size = head_dim / 2;  // head_dim / 2 <= 1024
  dim3 grid_size(hidden_dim_size / head_dim, num_tokens);
  rope_f32_kernel<<<grid_size, block_size, 0, stream>>>(q, k, sin_cache, cos_cache, start_pos, hidden_dim_size,
                                                        kv_dim_size, head_dim);
}

}  // namespace kernel
