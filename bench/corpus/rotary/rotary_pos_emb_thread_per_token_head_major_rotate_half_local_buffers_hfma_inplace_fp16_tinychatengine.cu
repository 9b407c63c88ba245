// RoPE in the style of MIT Han lab's TinyChatEngine (llm/src/ops/cuda/RotaryPosEmb.cu:
// RotaryPosEmb_cuda_forward, called by its fp16 LLaMA attention after q_proj / k_proj and the shape_cuda reshape),
// fp16, IN PLACE on query and key together:
//   query, key HEAD-MAJOR [num_heads, sqlen, head_dim] (Matrix3D<half> views, after shape_cuda); cos, sin tables
//   [1, max_sqlen, head_dim] half, full head_dim wide (Hugging Face's cat(freqs, freqs) caches, read from .bin
//   files), row = start_idx + token (start_idx = the past key length: a later chat turn in the first size set)
//   rotate_half pairing (j with j + head_dim / 2): each thread first builds rotate_half(q) and rotate_half(k) in
//   two per-thread local arrays half query_buf[128], key_buf[128] (negated second half first, via __hneg), then
//   q[j] = __hfma(q[j], cos[j], __hmul(query_buf[j], sin[j])) for every j: ALL MATH IN HALF, two roundings
//   (the product, then the fma)
//   ONE THREAD PER TOKEN looping over the whole head, one block per head: grid num_heads; Matrix3D's (x, y, z)
//   indexing x * dim_y * dim_z + y * dim_z + z kept, its views built inside the kernel from the pointers and
//   sizes the launcher passes (the spec reads scalar arguments, not structs); default stream
// Fixed: TinyChatEngine launches block(sqlen), which fails for prompts longer than 1024 tokens; the launcher now
// caps the block at 1024 and adds a second grid dimension over token chunks (token = blockIdx.y * blockDim.x +
// threadIdx.x). The local buffers hold 128 halves, so head_dim <= 128 is asserted (an older version had 4096).
#include <assert.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <algorithm>

template <typename T>
class Matrix3D {
 public:
  __host__ __device__ Matrix3D(T *data, int dim_x, int dim_y, int dim_z)
      : m_data(data), m_dim_x(dim_x), m_dim_y(dim_y), m_dim_z(dim_z) {}
  __host__ __device__ T &operator()(int x, int y, int z) { return m_data[x * m_dim_y * m_dim_z + y * m_dim_z + z]; }
  T *m_data;
  int m_dim_x, m_dim_y, m_dim_z;
};

/* kerntune:
args  = ["query_data: inout f16[heads * sqlen * 128]", "key_data: inout f16[heads * sqlen * 128]",
         "cos_data: in f16[max_len * 128] ~ uniform(-1, 1)", "sin_data: in f16[max_len * 128] ~ uniform(-1, 1)",
         "num_heads: i32 = heads", "sqlen: i32 = sqlen", "head_embed: i32 = 128", "max_sqlen: i32 = max_len",
         "start_idx: i32 = start", "len: i32 = sqlen"]
sizes = [{ heads = 32, sqlen = 4096, start = 512, max_len = 4608 },
         { heads = 32, sqlen = 1, start = 1000, max_len = 4096 },
         { heads = 40, sqlen = 333, start = 17, max_len = 2048 }]
grid  = ["heads", "cdiv(sqlen, 1024)"]
block = "min(sqlen, 1024)"
*/
__global__ void RotaryPosEmb_cuda_forward(half *query_data, half *key_data, half *cos_data, half *sin_data,
                                          int num_heads, int sqlen, int head_embed, int max_sqlen, int start_idx,
                                          int len) {
  half query_buf[128], key_buf[128];

  Matrix3D<half> query(query_data, num_heads, sqlen, head_embed);
  Matrix3D<half> key(key_data, num_heads, sqlen, head_embed);
  Matrix3D<half> cos(cos_data, 1, max_sqlen, head_embed);
  Matrix3D<half> sin(sin_data, 1, max_sqlen, head_embed);
  int half_pos = head_embed / 2;

  // head from the block, token from the thread
  int b = blockIdx.x;
  int i = blockIdx.y * blockDim.x + threadIdx.x;

  if (b < num_heads && i < len) {
    for (int j = 0; j < half_pos; j++) {
      query_buf[j] = __hneg(query(b, i, j + half_pos));
      key_buf[j] = __hneg(key(b, i, j + half_pos));
    }

    for (int j = half_pos; j < head_embed; j++) {
      query_buf[j] = query(b, i, j - half_pos);
      key_buf[j] = key(b, i, j - half_pos);
    }

    for (int j = 0; j < head_embed; j++) {
      half cos_half = cos(0, i + start_idx, j);
      half sin_half = sin(0, i + start_idx, j);

      query(b, i, j) = __hfma(query(b, i, j), cos_half, __hmul(query_buf[j], sin_half));
      key(b, i, j) = __hfma(key(b, i, j), cos_half, __hmul(key_buf[j], sin_half));
    }
  }
}

// query_states, key_states: device [num_heads, sqlen, head_dim] half, rotated in place; cos, sin: device
// [max_sqlen, head_dim] half caches; start_idx: the number of cached (past) tokens.
void rotary_pos_emb_forward(Matrix3D<half> query_states, Matrix3D<half> key_states, Matrix3D<half> cos,
                            Matrix3D<half> sin, int start_idx, int sqlen) {
  const int num_heads = query_states.m_dim_x;
  const int head_dim = cos.m_dim_z;
  assert(head_dim <= 128 && start_idx + sqlen <= cos.m_dim_y);
  const int threads = std::min(sqlen, 1024);
  dim3 grid(num_heads, (sqlen + threads - 1) / threads, 1);
  dim3 block(threads, 1, 1);
  RotaryPosEmb_cuda_forward<<<grid, block>>>(query_states.m_data, key_states.m_data, cos.m_data, sin.m_data, num_heads,
                                             sqlen, head_dim, cos.m_dim_y, start_idx, sqlen);
}
