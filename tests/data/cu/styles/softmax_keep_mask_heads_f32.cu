// Softmax of fp32 scores [H, Q, K] times a scale with a byte keep-mask [Q, K] shared by every head (0: the key is
// left out); a warp per row.
#include <cstdint>
/* kerntune:
args  = ["p: out f32[H * Q * K]", "s: in f32[H * Q * K]", "keep: in u8[Q * K] ~ randint(0, 2)", "H: i32 = H", "Q: i32 = Q", "K: i32 = K", "scale: f32 = 0.125"]
sizes = [{ H = 8, Q = 128, K = 512 }, { H = 3, Q = 5, K = 77 }]
grid  = "cdiv(H * Q, 4)"
block = ["32", "4"]
atol  = 1e-6  # probabilities of about 1 / K
*/
__global__ void softmax_keep(float* p, const float* s, const uint8_t* keep, int H, int Q, int K, float scale) {
  const int r = blockIdx.x * 4 + threadIdx.y;
  if (r >= H * Q) return;
  const float* row = s + (size_t)r * K;
  const uint8_t* kr = keep + (size_t)(r % Q) * K;
  float m = -INFINITY;
  for (int k = threadIdx.x; k < K; k += 32)
    if (kr[k]) m = fmaxf(m, row[k] * scale);
  for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float sum = 0.f;
  for (int k = threadIdx.x; k < K; k += 32)
    if (kr[k]) sum += expf(row[k] * scale - m);
  for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  for (int k = threadIdx.x; k < K; k += 32)
    p[(size_t)r * K + k] = kr[k] && sum > 0.f ? expf(row[k] * scale - m) / sum : 0.f;
}

void softmax_keep_launch(float* p, const float* s, const uint8_t* keep, int H, int Q, int K, float scale,
                         cudaStream_t stream) {
  softmax_keep<<<(H * Q + 3) / 4, dim3(32, 4), 0, stream>>>(p, s, keep, H, Q, K, scale);
}
