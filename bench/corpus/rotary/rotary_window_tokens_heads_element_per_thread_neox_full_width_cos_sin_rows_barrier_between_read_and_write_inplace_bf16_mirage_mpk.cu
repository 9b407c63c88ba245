// RoPE as the Mirage persistent kernel (MPK) applies it inside its attention tasks (mirage-project/mirage,
// include/mirage/persistent_kernel/tasks/ampere/rotary_embedding.cuh: kernel::rotary_embedding<T, InputSmem,
// NUM_HEAD, WINDOW_SIZE, HEAD_DIM>), written as a stand-alone task kernel on global memory, bf16:
//   qk [num_tokens, NUM_HEAD, HEAD_DIM] rotated IN PLACE (MPK rotates the q / k tile it holds in shared memory)
//   cos, sin [num_tokens, HEAD_DIM] in T, FULL WIDTH rows (the Hugging Face cos / sin with both halves filled),
//   already gathered for each token's position by the caller (MPK hands the task cos_ptr / sin_ptr of its window)
//   NeoX halves: col < HEAD_DIM / 2: x[col] * cos - x[col + HEAD_DIM / 2] * sin, else x[col] * cos +
//   x[col - HEAD_DIM / 2] * sin, each table read at the element's own column; fp32 math, one rounding to T
//   one task (block) of NUM_THREADS = 128 threads per WINDOW_SIZE tokens (grid ceil(num_tokens / WINDOW_SIZE));
//   the task walks its window token by token and head by head (#pragma unroll on the compile-time loops), one
//   ELEMENT per thread, a __syncthreads() between reading the pair and writing the element back
//   template <T, NUM_HEAD, WINDOW_SIZE, HEAD_DIM> in namespace kernel; spec = <bf16, 32, 8, 128>
// Fixed: (1) the barrier sat inside `for (i = threadIdx.x; i < HEAD_DIM; i += NUM_THREADS)`, so for HEAD_DIM <
// NUM_THREADS the threads past HEAD_DIM skipped it (a divergent __syncthreads); (2) for HEAD_DIM > NUM_THREADS a
// thread rotated column i, wrote it, and then read it back as the partner of column i + HEAD_DIM / 2 in its next
// iteration. Now every thread computes all its columns of the row into registers, the whole block meets one
// barrier, then writes. (3) The window of the last task is cut at num_tokens (MPK's windows are always full).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#ifndef NUM_THREADS
#define NUM_THREADS 128
#endif

namespace kernel {

/* kerntune:
args  = ["qk: inout bf16[num_tokens * 32 * 128]", "cos_ptr: in bf16[num_tokens * 128] ~ uniform(-1, 1)",
         "sin_ptr: in bf16[num_tokens * 128] ~ uniform(-1, 1)", "num_tokens: i32 = num_tokens"]
sizes = [{ num_tokens = 8192 }, { num_tokens = 4 }, { num_tokens = 1001 }]
grid  = "cdiv(num_tokens, 8)"
block = 128
template_args = ["__nv_bfloat16", "32", "8", "128"]
*/
template <typename T, int NUM_HEAD, int WINDOW_SIZE, int HEAD_DIM = 128>
__global__ void __launch_bounds__(NUM_THREADS)
    rotary_embedding_task(T *qk, T const *cos_ptr, T const *sin_ptr, int num_tokens) {
  constexpr int VALS_PER_THREAD = (HEAD_DIM + NUM_THREADS - 1) / NUM_THREADS;
  int const token_offset = blockIdx.x * WINDOW_SIZE;

#pragma unroll
  for (int win_idx = 0; win_idx < WINDOW_SIZE; ++win_idx) {
    int const seq_idx = token_offset + win_idx;
    bool const valid_token = seq_idx < num_tokens; // block-uniform

    T const *cur_cos_ptr = cos_ptr + (int64_t)seq_idx * HEAD_DIM;
    T const *cur_sin_ptr = sin_ptr + (int64_t)seq_idx * HEAD_DIM;

#pragma unroll
    for (int head_idx = 0; head_idx < NUM_HEAD; ++head_idx) {
      T *row = qk + ((int64_t)seq_idx * NUM_HEAD + head_idx) * HEAD_DIM;
      float v_rot[VALS_PER_THREAD];

#pragma unroll
      for (int k = 0; k < VALS_PER_THREAD; ++k) {
        uint32_t const i = threadIdx.x + k * NUM_THREADS;
        if (valid_token && i < HEAD_DIM) {
          float cos = static_cast<float>(cur_cos_ptr[i]);
          float sin = static_cast<float>(cur_sin_ptr[i]);
          if (i < HEAD_DIM / 2) {
            float v1 = static_cast<float>(row[i]);
            float v2 = static_cast<float>(row[i + HEAD_DIM / 2]);
            v_rot[k] = v1 * cos - v2 * sin;
          } else {
            float v1 = static_cast<float>(row[i]);
            float v2 = static_cast<float>(row[i - HEAD_DIM / 2]);
            v_rot[k] = v1 * cos + v2 * sin;
          }
        }
      }
      __syncthreads(); // every partner read before any element of the row is written
#pragma unroll
      for (int k = 0; k < VALS_PER_THREAD; ++k) {
        uint32_t const i = threadIdx.x + k * NUM_THREADS;
        if (valid_token && i < HEAD_DIM) {
          row[i] = static_cast<T>(v_rot[k]);
        }
      }
    }
  }
}

} // namespace kernel

// qk: device [num_tokens, num_heads, 128] bf16, in place; cos, sin: [num_tokens, 128] bf16 rows per token.
void launch_rotary_embedding_task(__nv_bfloat16 *qk, __nv_bfloat16 const *cos, __nv_bfloat16 const *sin,
                                  int num_tokens, cudaStream_t stream) {
  constexpr int kNumHead = 32;
  constexpr int kWindowSize = 8;
  dim3 grid_dim((num_tokens + kWindowSize - 1) / kWindowSize, 1, 1);
  dim3 block_dim(NUM_THREADS, 1, 1);
  kernel::rotary_embedding_task<__nv_bfloat16, kNumHead, kWindowSize, 128>
      <<<grid_dim, block_dim, 0, stream>>>(qk, cos, sin, num_tokens);
}
