// Scaled causal ("upper triangular") masked softmax over attention scores (fp16 in and out, fp32 math), in the
// style of Megatron-LM's fused scaled_upper_triang_masked_softmax: a warp-softmax kernel template over
// log2_elements (the key count rounded up to a power of two), WARP_SIZE macro, every lane keeping
// ELEMENTS_PER_THREAD = 2^log2_elements / 32 scores in registers under #pragma unroll, warp shuffles for the max
// and the sum, the host picking the instantiation with a switch on log2(k_len) (keys up to 2048). Scores are
// [attn_batches, q_len, k_len]; the causal mask is bottom-right aligned so that q_len <= k_len works for prefill
// (q_len == k_len) and for decode / chunked prefill: query q sees keys 0 .. q + k_len - q_len, masked keys get
// probability 0. Grid (q_len, ceil(attn_batches / 4)): blockIdx.x is the query, each of the block's 4 warps
// (threadIdx.y) one batch-head row at that query.
// Tolerance: probabilities are ~1/k_len, so the default f16 atol of 1e-2 would accept any output; atol is 1e-6
// (above the fp16 subnormal step of 6e-8), rtol stays at the f16 default.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cmath>

#define WARP_SIZE 32
#define WARPS_PER_BLOCK 4

/* kerntune:
args  = ["dst: out f16[attn_batches * q_len * k_len]", "src: in f16[attn_batches * q_len * k_len]",
         "scale: f32 = 0.08838834764831845", "attn_batches: i32 = attn_batches", "q_len: i32 = q_len",
         "k_len: i32 = k_len"]
sizes = [{ attn_batches = 128, q_len = 1024, k_len = 1024 }, { attn_batches = 64, q_len = 4, k_len = 1000 },
         { attn_batches = 37, q_len = 519, k_len = 1001 }]
grid  = ["q_len", "cdiv(attn_batches, 4)"]
block = [32, 4]
atol  = 1e-6
template_args = ["10"]
*/
template <int log2_elements>
__global__ void scaled_causal_masked_softmax_warp_forward(__half* __restrict__ dst, const __half* __restrict__ src,
                                                          const float scale, const int attn_batches, const int q_len,
                                                          const int k_len) {
  constexpr int kNextPow2 = 1 << log2_elements;
  constexpr int ELEMENTS_PER_THREAD = kNextPow2 / WARP_SIZE;

  const int query = blockIdx.x;
  const int batch = blockIdx.y * WARPS_PER_BLOCK + threadIdx.y;
  if (batch >= attn_batches) return;
  const int lane = threadIdx.x;
  const int last_key = query + (k_len - q_len);  // keys 0 .. last_key are visible
  const int64_t offset = ((int64_t)batch * q_len + query) * k_len;
  src += offset;
  dst += offset;

  float elements[ELEMENTS_PER_THREAD];
  float max_value = -INFINITY;
#pragma unroll
  for (int it = 0; it < ELEMENTS_PER_THREAD; ++it) {
    const int key = it * WARP_SIZE + lane;
    elements[it] = (key < k_len && key <= last_key) ? __half2float(src[key]) * scale : -INFINITY;
    max_value = fmaxf(max_value, elements[it]);
  }
#pragma unroll
  for (int mask = WARP_SIZE / 2; mask > 0; mask >>= 1)
    max_value = fmaxf(max_value, __shfl_xor_sync(0xffffffffu, max_value, mask));

  float sum = 0.f;
#pragma unroll
  for (int it = 0; it < ELEMENTS_PER_THREAD; ++it) {
    const int key = it * WARP_SIZE + lane;
    elements[it] = (key < k_len && key <= last_key) ? __expf(elements[it] - max_value) : 0.f;
    sum += elements[it];
  }
#pragma unroll
  for (int mask = WARP_SIZE / 2; mask > 0; mask >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, mask);

#pragma unroll
  for (int it = 0; it < ELEMENTS_PER_THREAD; ++it) {
    const int key = it * WARP_SIZE + lane;
    if (key < k_len) dst[key] = key <= last_key ? __float2half(elements[it] / sum) : __float2half(0.f);
  }
}

template <int log2_elements>
static void launch_causal_softmax(__half* dst, const __half* src, float scale, int attn_batches, int q_len,
                                  int k_len, cudaStream_t stream) {
  dim3 threads(WARP_SIZE, WARPS_PER_BLOCK, 1);
  dim3 blocks(q_len, (attn_batches + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK, 1);
  scaled_causal_masked_softmax_warp_forward<log2_elements>
      <<<blocks, threads, 0, stream>>>(dst, src, scale, attn_batches, q_len, k_len);
}

// Requires 1 <= q_len <= k_len <= 2048.
void dispatch_scaled_causal_masked_softmax_forward(__half* dst, const __half* src, float scale, int attn_batches,
                                                   int q_len, int k_len, cudaStream_t stream) {
  int log2_elements = 0;
  while ((1 << log2_elements) < k_len) ++log2_elements;
  switch (log2_elements) {
    case 0: case 1: case 2: case 3: case 4: case 5:
      launch_causal_softmax<5>(dst, src, scale, attn_batches, q_len, k_len, stream); break;
    case 6: launch_causal_softmax<6>(dst, src, scale, attn_batches, q_len, k_len, stream); break;
    case 7: launch_causal_softmax<7>(dst, src, scale, attn_batches, q_len, k_len, stream); break;
    case 8: launch_causal_softmax<8>(dst, src, scale, attn_batches, q_len, k_len, stream); break;
    case 9: launch_causal_softmax<9>(dst, src, scale, attn_batches, q_len, k_len, stream); break;
    case 10: launch_causal_softmax<10>(dst, src, scale, attn_batches, q_len, k_len, stream); break;
    case 11: launch_causal_softmax<11>(dst, src, scale, attn_batches, q_len, k_len, stream); break;
    default: break;
  }
}
