// masked attention-score softmax in place, bf16 scores [batch, heads, q, k] and an fp32 additive mask [batch, q, k]
// shared by the heads of a batch (consecutive rows), no scale; one warp per row, a register cache of 8 per lane
#include <cuda_bf16.h>
/* kerntune:
args  = ["s: inout bf16[B * H * Q * K]", "m: in f32[B * Q * K]", "H: i32 = H", "Q: i32 = Q", "K: i32 = K", "total_rows: i32 = B * H * Q"]
sizes = [{ B = 4, H = 16, Q = 64, K = 256 }, { B = 2, H = 3, Q = 5, K = 200 }]
grid  = "cdiv(B * H * Q, 4)"
block = "128"
*/
__global__ void masked_softmax(__nv_bfloat16* s, const float* m, int H, int Q, int K, int total_rows) {
  const int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= total_rows) return;
  const int b = row / (H * Q), qi = row % Q;
  __nv_bfloat16* r = s + (size_t)row * K;
  const float* mr = m + ((size_t)b * Q + qi) * K;
  float v[8], mx = -INFINITY;
  for (int j = 0; j < 8; ++j) {
    const int c = lane + 32 * j;
    v[j] = c < K ? __bfloat162float(r[c]) + mr[c] : -INFINITY;
    mx = fmaxf(mx, v[j]);
  }
  for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
  for (int j = 0; j < 8; ++j) { v[j] = lane + 32 * j < K ? expf(v[j] - mx) : 0.f; sum += v[j]; }
  for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  for (int j = 0; j < 8; ++j) if (lane + 32 * j < K) r[lane + 32 * j] = __float2bfloat16(v[j] / sum);
}
