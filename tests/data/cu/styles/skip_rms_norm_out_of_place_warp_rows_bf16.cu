// Skip RMSNorm bf16 into an output of its own (ONNX Runtime's SkipSimplifiedLayerNormalization without its sum
// output): s = input + skip in fp32 (not rounded, not stored), out = bf16(s * rsqrt(mean(s^2) + eps) * gamma). A warp
// per row, 4 rows per block, the row's sums recomputed in the second pass.
#include <cuda_bf16.h>

/* kerntune:
args  = ["output: out bf16[rows * ld]", "input: in bf16[rows * ld]", "skip: in bf16[rows * ld]", "gamma: in bf16[ld]",
         "ld: i32 = ld", "rows: i32 = rows", "epsilon: f32 = 1e-6"]
sizes = [{ rows = 4096, ld = 5120 }, { rows = 5, ld = 768 }]
grid  = "cdiv(rows, 4)"
block = 128
*/
__global__ void skip_rms_rows(__nv_bfloat16* output, const __nv_bfloat16* input, const __nv_bfloat16* skip,
                              const __nv_bfloat16* gamma, int ld, int rows, float epsilon) {
  const int row = blockIdx.x * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const long long base = (long long)row * ld;
  float ss = 0.f;
  for (int i = lane; i < ld; i += 32) {
    const float s = __bfloat162float(input[base + i]) + __bfloat162float(skip[base + i]);
    ss += s * s;
  }
  for (int m = 16; m > 0; m >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, m);
  const float r = rsqrtf(ss / ld + epsilon);
  for (int i = lane; i < ld; i += 32) {
    const float s = __bfloat162float(input[base + i]) + __bfloat162float(skip[base + i]);
    output[base + i] = __float2bfloat16(s * r * __bfloat162float(gamma[i]));
  }
}
