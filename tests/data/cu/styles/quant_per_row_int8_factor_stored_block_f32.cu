// Per-row int8 quantization as CTranslate2's quantize_kernel writes it: fp32 rows of `depth` values, one row per
// block, the absolute maximum through a shared-memory tree, and the scale the quantization factor itself:
// scale = max != 0 ? 127 / max : 1, stored per row (dequantizing divides by it), the values multiplied by it and
// rounded with nearbyintf before the cast (round_before_cast).
#include <cstdint>

constexpr int kBlock = 512;

/* kerntune:
args  = ["input: in f32[batch * depth]", "depth: i64 = depth", "scales: out f32[batch]", "output: out i8[batch * depth]"]
sizes = [{ batch = 1024, depth = 4096 }, { batch = 7, depth = 10001 }]
grid  = "batch"
block = "512"
*/
__global__ void quantize_rows(const float* input, int64_t depth, float* scales, int8_t* output) {
  __shared__ float red[kBlock];
  __shared__ float scale;
  input += blockIdx.x * depth;
  output += blockIdx.x * depth;
  float thread_max = 0.f;
  for (int64_t i = threadIdx.x; i < depth; i += kBlock) thread_max = fmaxf(fabsf(input[i]), thread_max);
  red[threadIdx.x] = thread_max;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float max = red[0];
    scale = max != 0.f ? 127.f / max : 1.f;
    scales[blockIdx.x] = scale;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < depth; i += kBlock) output[i] = static_cast<int8_t>(nearbyintf(input[i] * scale));
}

void quantize(const float* input, float* scales, int8_t* output, int64_t batch, int64_t depth, cudaStream_t stream) {
  quantize_rows<<<(unsigned)batch, kBlock, 0, stream>>>(input, depth, scales, output);
}
