// NeoX rotary embedding (fp16, out of place) in the style of llama.cpp's ggml-cuda rope.cu: no cos/sin cache, the
// angle computed on the fly from the int32 position, theta = freq_scale * pos * powf(freq_base, -2 * i / n_dims),
// cos/sin scaled by attn_factor; the tensor is ggml-shaped (ne0 = head_dim, ne1 = heads, one row per (token,
// head)) with row and token strides s1, s2 in elements; partial rotary (n_dims < ne0) copies the rest through.
// Launch as ggml does: block (1, CUDA_ROPE_BLOCK_SIZE, 1), grid (rows, ceil(ne0 / (2 * CUDA_ROPE_BLOCK_SIZE)), 1),
// each thread one pair (i0, i0 + 1) of the row's columns, threads past the row returning; fp32 math, one rounding.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

#define CUDA_ROPE_BLOCK_SIZE 256

/* kerntune:
args  = ["x: in f16[n_tokens * n_heads * head_dim]", "dst: out f16[n_tokens * n_heads * head_dim]",
         "ne0: i32 = head_dim", "ne1: i32 = n_heads", "s1: i32 = head_dim", "s2: i32 = n_heads * head_dim",
         "n_dims: i32 = n_dims", "pos: in i32[n_tokens] ~ randint(0, 8192)", "freq_scale: f32 = 1.0",
         "freq_base: f32 = 10000.0", "attn_factor: f32 = 1.0"]
sizes = [{ n_tokens = 8192, n_heads = 40, head_dim = 128, n_dims = 128 },
         { n_tokens = 4, n_heads = 32, head_dim = 128, n_dims = 128 },
         { n_tokens = 1001, n_heads = 7, head_dim = 96, n_dims = 64 }]
grid  = ["n_tokens * n_heads", "cdiv(head_dim, 512)", 1]
block = [1, 256, 1]
*/
static __global__ void rope_neox_f16(const __half* x, __half* dst, const int ne0, const int ne1, const int s1,
                                     const int s2, const int n_dims, const int32_t* pos, const float freq_scale,
                                     const float freq_base, const float attn_factor) {
  const int i0 = 2 * (blockDim.y * blockIdx.y + threadIdx.y);
  if (i0 >= ne0) return;

  const int row = blockDim.x * blockIdx.x + threadIdx.x;
  const int row_x = row % ne1;      // head
  const int channel_x = row / ne1;  // token

  const int64_t idst = (int64_t)row * ne0 + i0 / 2;
  const int64_t ix = (int64_t)channel_x * s2 + (int64_t)row_x * s1 + i0 / 2;

  if (i0 >= n_dims) {  // past the rotated part: copied through, in place of the pair (i0, i0 + 1)
    dst[idst + i0 / 2 + 0] = x[ix + i0 / 2 + 0];
    dst[idst + i0 / 2 + 1] = x[ix + i0 / 2 + 1];
    return;
  }

  const float theta_base = (float)pos[channel_x] * powf(freq_base, -(float)i0 / (float)n_dims);
  const float theta = freq_scale * theta_base;
  const float cos_theta = cosf(theta) * attn_factor;
  const float sin_theta = sinf(theta) * attn_factor;

  const float x0 = __half2float(x[ix + 0]);
  const float x1 = __half2float(x[ix + n_dims / 2]);
  dst[idst + 0] = __float2half(x0 * cos_theta - x1 * sin_theta);
  dst[idst + n_dims / 2] = __float2half(x0 * sin_theta + x1 * cos_theta);
}

// x, dst: [n_tokens, n_heads, head_dim] contiguous; pos: [n_tokens]
void ggml_cuda_rope_neox_f16(const __half* x, __half* dst, int n_tokens, int n_heads, int head_dim, int n_dims,
                             const int32_t* pos, float freq_base, float freq_scale, float attn_factor,
                             cudaStream_t stream) {
  const int ne0 = head_dim;
  const int ne1 = n_heads;
  const int nr = n_tokens * n_heads;
  const int s1 = head_dim;
  const int s2 = n_heads * head_dim;
  const dim3 block_dims(1, CUDA_ROPE_BLOCK_SIZE, 1);
  const int n_blocks_x = (ne0 + 2 * CUDA_ROPE_BLOCK_SIZE - 1) / (2 * CUDA_ROPE_BLOCK_SIZE);
  const dim3 block_nums(nr, n_blocks_x, 1);
  rope_neox_f16<<<block_nums, block_dims, 0, stream>>>(x, dst, ne0, ne1, s1, s2, n_dims, pos, freq_scale, freq_base,
                                                       attn_factor);
}
