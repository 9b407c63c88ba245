// Padded-key attention softmax in bf16 (the TensorRT BERT plugin's "mask index" of valid key counts): scores
// [batch, heads * q_len rows, keys]; sequence b keeps its first valid_len[b] keys (right padding after them), the
// rest are written 0, and a sequence with no valid key gets a row of zeros (no fallback to every key). One row a
// block over a 1-D grid with a row-count argument; the block reduces by warp shuffles, then through shared memory;
// fp32 math, expf, one reciprocal of the sum per row, one rounding at the store.
#include <cuda_bf16.h>
__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
  for (int o = 16; o; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < (int)(blockDim.x >> 5); ++w) v = is_max ? fmaxf(v, red[w]) : v + red[w];
  __syncthreads();
  return v;
}

/* kerntune:
args  = ["probs: out bf16[batch * heads * q * keys]", "scores: in bf16[batch * heads * q * keys]",
         "valid_len: in i32[batch] ~ randint(0, keys + 1)", "n_rows: i32 = batch * heads * q",
         "rows_per_seq: i32 = heads * q", "keys: i32 = keys"]
sizes = [{ batch = 4, heads = 16, q = 64, keys = 1024 }, { batch = 8, heads = 8, q = 1, keys = 2053 },
         { batch = 3, heads = 5, q = 7, keys = 77 }, { batch = 16, heads = 2, q = 3, keys = 7 }]
grid  = "batch * heads * q"
block = 128
atol  = 1e-6  # probabilities of about 1 / keys; 7 keys: some sequences have none (a row of zeros)
*/
__global__ void softmax_valid_keys(__nv_bfloat16* __restrict__ probs, const __nv_bfloat16* __restrict__ scores,
                                   const int* __restrict__ valid_len, int n_rows, int rows_per_seq, int keys) {
  __shared__ float red[32];
  const int row = blockIdx.x;
  if (row >= n_rows) return;
  const int len = min(keys, valid_len[row / rows_per_seq]);
  const __nv_bfloat16* x = scores + (long long)row * keys;
  __nv_bfloat16* y = probs + (long long)row * keys;
  float m = -INFINITY;
  for (int k = threadIdx.x; k < len; k += blockDim.x) m = fmaxf(m, __bfloat162float(x[k]));
  m = block_reduce(m, true, red);
  float sum = 0.f;
  for (int k = threadIdx.x; k < len; k += blockDim.x) sum += expf(__bfloat162float(x[k]) - m);
  sum = block_reduce(sum, false, red);
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  for (int k = threadIdx.x; k < keys; k += blockDim.x)
    y[k] = __float2bfloat16_rn(k < len ? expf(__bfloat162float(x[k]) - m) * inv : 0.f);
}

void softmax_valid_keys_launch(__nv_bfloat16* probs, const __nv_bfloat16* scores, const int* valid_len, int batch,
                               int heads, int q, int keys, cudaStream_t stream) {
  const int rows = batch * heads * q;
  softmax_valid_keys<<<rows, 128, 0, stream>>>(probs, scores, valid_len, rows, heads * q, keys);
}
