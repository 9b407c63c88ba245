// Attention-probability softmax with a scale and an additive key-padding mask, in the style of BERT-era
// "scaled masked softmax" CUDA extensions: scores [batch, heads * q_len, k_len] in fp32, the mask [batch, k_len]
// (0 or a large negative value per key) shared by every row of a batch, the output in fp16. Rows per block
// (blockDim.y = 4 warps, one warp per row), each lane caching its elements in a fixed register array.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define WARPS_PER_BLOCK 4
#define MAX_ELEMS_PER_LANE 32  // rows up to 1024 keys

/* kerntune:
args  = ["scores: in f32[batch * rows_per_batch * k_len]", "key_mask: in f32[batch * k_len] ~ uniform(-8, 0)",
         "probs: out f16[batch * rows_per_batch * k_len]", "rows_per_batch: i32 = rows_per_batch",
         "k_len: i32 = k_len", "total_rows: i32 = batch * rows_per_batch", "scale: f32 = 0.125"]
sizes = [{ batch = 64, rows_per_batch = 2048, k_len = 512 }, { batch = 2, rows_per_batch = 64, k_len = 1024 },
         { batch = 7, rows_per_batch = 333, k_len = 387 }]
grid  = "cdiv(batch * rows_per_batch, 4)"
block = [32, 4]
*/
__global__ void scaled_key_masked_softmax(const float* __restrict__ scores, const float* __restrict__ key_mask,
                                          __half* __restrict__ probs, int rows_per_batch, int k_len,
                                          int total_rows, float scale) {
  const int row = blockIdx.x * WARPS_PER_BLOCK + threadIdx.y;
  if (row >= total_rows) return;
  const int b = row / rows_per_batch;
  const float* s = scores + (size_t)row * k_len;
  const float* m = key_mask + (size_t)b * k_len;
  float v[MAX_ELEMS_PER_LANE];
  float mx = -INFINITY;
#pragma unroll
  for (int j = 0; j < MAX_ELEMS_PER_LANE; ++j) {
    const int c = threadIdx.x + 32 * j;
    v[j] = c < k_len ? s[c] * scale + m[c] : -INFINITY;
    mx = fmaxf(mx, v[j]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < MAX_ELEMS_PER_LANE; ++j) {
    v[j] = threadIdx.x + 32 * j < k_len ? __expf(v[j] - mx) : 0.f;
    sum += v[j];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float inv = 1.f / sum;
#pragma unroll
  for (int j = 0; j < MAX_ELEMS_PER_LANE; ++j) {
    const int c = threadIdx.x + 32 * j;
    if (c < k_len) probs[(size_t)row * k_len + c] = __float2half(v[j] * inv);
  }
}

void scaled_key_masked_softmax_launch(const float* scores, const float* key_mask, __half* probs, int batch,
                                      int rows_per_batch, int k_len, float scale, cudaStream_t stream) {
  const int total_rows = batch * rows_per_batch;
  dim3 block(32, WARPS_PER_BLOCK);
  dim3 grid((total_rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
  scaled_key_masked_softmax<<<grid, block, 0, stream>>>(scores, key_mask, probs, rows_per_batch, k_len, total_rows,
                                                        scale);
}
