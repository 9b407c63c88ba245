// Attention probabilities with per-head attention sinks in fp16 (as vLLM / FlashInfer keep them: the learned sinks in
// fp32, one per head), one warp per score row, four rows a block, launched over (query blocks, heads, batch): the head
// is blockIdx.y and the row's sink is read once with it. The logits are scores * scale in fp32 (not rounded); the
// sink is not scaled. The row's max starts from the sink, so the sink takes part in it; after the warp's sum its
// exponential joins the denominator, and it has no output column:
//   m = max(sink_h, max_k s_k * scale),  p_k = exp(s_k * scale - m) / (sum_k exp(s_k * scale - m) + exp(sink_h - m))
// Scores and probabilities fp16 [batch, heads, q_len, k_len], rounded once at the store.
#include <cuda_fp16.h>
/* kerntune:
args  = ["sinks: in f32[heads] ~ uniform(0, 4)", "scores: in f16[batch * heads * q_len * k_len] ~ uniform(-6, 6)",
         "out: out f16[batch * heads * q_len * k_len]", "k_len: i32 = k_len", "q_len: i32 = q_len",
         "heads: i32 = heads", "scale: f32 = 0.5"]
sizes = [{ batch = 2, heads = 8, q_len = 64, k_len = 300 }, { batch = 8, heads = 16, q_len = 1, k_len = 1000 },
         { batch = 3, heads = 5, q_len = 33, k_len = 77 }]
grid  = ["cdiv(q_len, 4)", "heads", "batch"]
block = ["32", "4"]
atol  = 1e-5
*/
__global__ void sink_softmax_warp_f16(const float* __restrict__ sinks, const __half* __restrict__ scores,
                                      __half* __restrict__ out, int k_len, int q_len, int heads, float scale) {
  const int q = blockIdx.x * blockDim.y + threadIdx.y;
  if (q >= q_len) return;
  const int lane = threadIdx.x;
  const long long row = ((long long)blockIdx.z * heads + blockIdx.y) * q_len + q;
  const __half* s = scores + row * k_len;
  __half* o = out + row * k_len;
  const float sink = sinks[blockIdx.y];
  float mx = sink;
  for (int k = lane; k < k_len; k += 32) mx = fmaxf(mx, __half2float(s[k]) * scale);
  for (int d = 16; d; d >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
  float sum = 0.f;
  for (int k = lane; k < k_len; k += 32) sum += expf(__half2float(s[k]) * scale - mx);
  for (int d = 16; d; d >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  const float inv = 1.f / (sum + expf(sink - mx));
  for (int k = lane; k < k_len; k += 32) o[k] = __float2half_rn(expf(__half2float(s[k]) * scale - mx) * inv);
}
