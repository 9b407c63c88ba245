// Rotary embedding as ExLlamaV2 writes it (exllamav2_ext/cuda/rope.cu, rope_cuda_kernel behind rope_cuda), fp16,
// in place on one tensor (q or k, one call each), NeoX pairs (neox_style = true, a RUN-TIME flag choosing between
// two __device__ bodies):
//   x: [batch, rows_per_batch, head_dim] with rows_per_batch = seq_len * num_heads (a [batch, seq, heads, dim] view)
//   position of row r of batch b: past_len + r / num_heads, where past_len == -1 means "read past_lens[b]" (batched
//   generation with per-sequence cache lengths; a non-negative past_len is added to past_lens[b] when given)
//   sin, cos: FULL-WIDTH fp16 tables [max_pos, head_dim] (HF's cat(freqs, freqs)); only the first half is read
//   x_l' = x_l * cos + x_r * (-sin),  x_r' = x_r * cos + x_l * sin       all in half2 arithmetic (__hmul2, __hfma2)
// ExLlamaV2's conventions: MatrixView_half / MatrixView_half_rw helper classes (item_half2, set_half2 over row-major
// [height, width] views with dummy heights MAX_ROWS / MAX_POS_EMBEDDINGS), one half2 (two adjacent channels of the
// left half and their partners half_dim away) per thread at column = (blockIdx.x * THREADS_X + threadIdx.x) * 2,
// const int THREADS_X = 32 / THREADS_Y = 4 and a DIVIDE macro; the grid's x covers DIVIDE(head_dim / 2, THREADS_X)
// blocks although a NeoX thread handles two channels (the blocks past half_dim / 2 threads return at once: the
// single-tensor launcher does not halve it, its q/k twin does); grid.y over rows in THREADS_Y-row steps (threads_y
// doubled while the grid's y would pass 65535; 4 for these sizes), grid.z the batch; threads_y passed to the kernel.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

#define DIVIDE(x, size) (((x) + (size) - 1) / (size))

const int THREADS_X = 32;
const int THREADS_Y = 4;
const int MAX_POS_EMBEDDINGS = 32768;  // Actual number doesn't matter
const int MAX_ROWS = 32768;            // Actual number doesn't matter

class MatrixView_half {
 public:
  const half* data;
  const int height;
  const int width;

  __device__ __forceinline__ MatrixView_half(const half* data, const int height, const int width)
      : data(data), height(height), width(width) {}

  __device__ __forceinline__ half item(int row, int column) const { return data[row * width + column]; }
  __device__ __forceinline__ half2 item_half2(int row, int column) const {
    return ((half2*)data)[(row * width + column) / 2];
  }
};

class MatrixView_half_rw {
 public:
  half* data;
  const int height;
  const int width;

  __device__ __forceinline__ MatrixView_half_rw(half* data, const int height, const int width)
      : data(data), height(height), width(width) {}

  __device__ __forceinline__ half item(int row, int column) const { return data[row * width + column]; }
  __device__ __forceinline__ half2 item_half2(int row, int column) const {
    return ((half2*)data)[(row * width + column) / 2];
  }
  __device__ __forceinline__ void set(int row, int column, half value) { data[row * width + column] = value; }
  __device__ __forceinline__ void set_half2(int row, int column, half2 value) {
    ((half2*)data)[(row * width + column) / 2] = value;
  }
};

union half2_uint32 {
  uint32_t as_uint32;
  half2 as_half2;
  __device__ half2_uint32(uint32_t val) : as_uint32(val) {}
  __device__ half2_uint32(half2 val) : as_half2(val) {}
};

__forceinline__ __device__ void rope_cuda_arr_neox(half* __restrict__ x, const half* __restrict__ sin,
                                                   const half* __restrict__ cos, int rows_per_batch, int head_dim,
                                                   int num_heads, int past_len, const int32_t* __restrict__ past_lens,
                                                   int threads_y) {
  MatrixView_half_rw x_(x, MAX_ROWS, head_dim);
  MatrixView_half sin_(sin, MAX_POS_EMBEDDINGS, head_dim);
  MatrixView_half cos_(cos, MAX_POS_EMBEDDINGS, head_dim);

  int column = (blockIdx.x * THREADS_X + threadIdx.x) * 2;
  int half_dim = head_dim / 2;
  if (column >= half_dim) return;

  int row = blockIdx.y * threads_y + threadIdx.y;
  if (row >= rows_per_batch) return;
  int batch_offset = blockIdx.z * rows_per_batch;
  int row_offset = batch_offset + row;

  // Position of this row

  if (past_len == -1) {
    past_len = past_lens[blockIdx.z];
    past_len = max(past_len, 0);
  } else if (past_lens) {
    past_len += past_lens[blockIdx.z];
  }

  int sincos_row = past_len + row / num_heads;
  sincos_row = max(sincos_row, 0);

  half2 cos2_l = cos_.item_half2(sincos_row, column);
  half2 cos2_r = cos2_l;  // the table's right half repeats the left
  half2 sin2_l = sin_.item_half2(sincos_row, column);
  half2 sin2_r = sin2_l;
  sin2_l = __hneg2(sin2_l);

  // Rotate the pair of half2s

  half2 item2_l = x_.item_half2(row_offset, column);
  half2 item2_r = x_.item_half2(row_offset, column + half_dim);
  half2 item2_ls = __hmul2(item2_r, sin2_l);
  half2 item2_rs = __hmul2(item2_l, sin2_r);
  item2_l = __hfma2(item2_l, cos2_l, item2_ls);
  item2_r = __hfma2(item2_r, cos2_r, item2_rs);
  x_.set_half2(row_offset, column, item2_l);
  x_.set_half2(row_offset, column + half_dim, item2_r);
}

__forceinline__ __device__ void rope_cuda_arr_gptj(half* __restrict__ x, const half* __restrict__ sin,
                                                   const half* __restrict__ cos, int rows_per_batch, int head_dim,
                                                   int num_heads, int past_len, const int32_t* __restrict__ past_lens,
                                                   int threads_y) {
  MatrixView_half_rw x_(x, MAX_ROWS, head_dim);
  MatrixView_half sin_(sin, MAX_POS_EMBEDDINGS, head_dim);
  MatrixView_half cos_(cos, MAX_POS_EMBEDDINGS, head_dim);

  int column = (blockIdx.x * THREADS_X + threadIdx.x) * 2;
  if (column >= head_dim) return;

  int row = blockIdx.y * threads_y + threadIdx.y;
  if (row >= rows_per_batch) return;
  int batch_offset = blockIdx.z * rows_per_batch;
  int row_offset = batch_offset + row;

  if (past_len == -1) {
    past_len = past_lens[blockIdx.z];
    past_len = max(past_len, 0);
  } else if (past_lens) {
    past_len += past_lens[blockIdx.z];
  }

  int sincos_row = past_len + row / num_heads;
  sincos_row = max(sincos_row, 0);

  half2 cos_01 = cos_.item_half2(sincos_row, column);
  half2_uint32 sin_01_ = half2_uint32(sin_.item_half2(sincos_row, column));
  sin_01_.as_uint32 ^= (1 << 15);  // -sin[i], sin[i + 1]
  half2 sin_01 = sin_01_.as_half2;

  half2 x_01 = x_.item_half2(row_offset, column);
  half2 x_10 = __lowhigh2highlow(x_01);
  half2 r = __hmul2(x_01, cos_01);
  r = __hfma2(x_10, sin_01, r);
  x_.set_half2(row_offset, column, r);
}

/* kerntune:
args  = ["x: inout f16[batch * seq_len * num_heads * head_dim]", "sin: in f16[4096 * head_dim] ~ uniform(-1, 1)",
         "cos: in f16[4096 * head_dim] ~ uniform(-1, 1)", "rows_per_batch: i32 = seq_len * num_heads",
         "head_dim: i32 = head_dim", "num_heads: i32 = num_heads", "past_len: i32 = -1",
         "past_lens: in i32[batch] ~ randint(0, 4096 - seq_len)", "threads_y: i32 = 4", "neox_style: u8 = 1"]
sizes = [{ batch = 16, seq_len = 512, num_heads = 32, head_dim = 128 },
         { batch = 64, seq_len = 1, num_heads = 32, head_dim = 128 },
         { batch = 3, seq_len = 333, num_heads = 20, head_dim = 80 }]
grid  = ["cdiv(head_dim / 2, 32)", "cdiv(seq_len * num_heads, 4)", "batch"]
block = [32, 4]
*/
__global__ void rope_cuda_kernel(half* __restrict__ x, const half* __restrict__ sin, const half* __restrict__ cos,
                                 int rows_per_batch, int head_dim, int num_heads, int past_len,
                                 const int32_t* __restrict__ past_lens, int threads_y, const bool neox_style) {
  if (neox_style)
    rope_cuda_arr_neox(x, sin, cos, rows_per_batch, head_dim, num_heads, past_len, past_lens, threads_y);
  else
    rope_cuda_arr_gptj(x, sin, cos, rows_per_batch, head_dim, num_heads, past_len, past_lens, threads_y);
}

// x: [batch_size, rows_per_batch, head_dim] half, in place; sin / cos: [max_pos, head_dim] half; past_lens:
// [batch_size] int32 or nullptr; past_len == -1 takes each sequence's position offset from past_lens.
void rope_cuda(cudaStream_t stream, half* x, const half* sin, const half* cos, const int batch_size,
               const int rows_per_batch, const int head_dim, const int num_heads, const int past_len,
               const int32_t* past_lens, const bool neox_style) {
  // For large batch sizes we risk exceeding grid dimension of 65535, so shift to block dimension instead

  int threads_y = THREADS_Y;
  while (DIVIDE(rows_per_batch, threads_y) > 65535) threads_y *= 2;

  dim3 blockDim, gridDim;
  blockDim.x = THREADS_X;
  blockDim.y = threads_y;
  gridDim.x = DIVIDE(head_dim / 2, THREADS_X);
  gridDim.y = DIVIDE(rows_per_batch, threads_y);
  gridDim.z = batch_size;

  rope_cuda_kernel<<<gridDim, blockDim, 0, stream>>>(x, sin, cos, rows_per_batch, head_dim, num_heads, past_len,
                                                     past_lens, threads_y, neox_style);
}
