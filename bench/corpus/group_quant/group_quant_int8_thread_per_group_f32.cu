// Per-group int8 quantization as first written: fp32 input, one thread per group (a flat 1-D index over all
// groups, QUANT_BLOCK threads per block) looping serially over its group twice (absolute maximum, then
// quantize), scale = absmax / 127 (1 for an all-zero group), roundf (half away from zero).
#include <cuda_runtime.h>
#include <cstdint>

#define QUANT_BLOCK 256

/* kerntune:
args  = ["in: in f32[tokens * hidden]", "out: out i8[tokens * hidden]", "scales: out f32[tokens * hidden / 128]",
         "num_groups: i32 = tokens * hidden / 128", "group_size: i32 = 128"]
sizes = [{ tokens = 4096, hidden = 4096 }, { tokens = 16, hidden = 14336 }, { tokens = 1001, hidden = 4096 }]
grid  = "cdiv(tokens * hidden / 128, 256)"
block = "256"
*/
__global__ void quantize_groups_int8(const float* in, int8_t* out, float* scales, int num_groups, int group_size) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= num_groups) return;
  const float* src = in + (size_t)g * group_size;
  int8_t* dst = out + (size_t)g * group_size;
  float amax = 0.f;
  for (int i = 0; i < group_size; ++i) amax = fmaxf(amax, fabsf(src[i]));
  const float scale = amax > 0.f ? amax / 127.f : 1.f;
  scales[g] = scale;
  for (int i = 0; i < group_size; ++i) dst[i] = (int8_t)roundf(src[i] / scale);
}

void quantize_groups_int8_launch(const float* in, int8_t* out, float* scales, int tokens, int hidden,
                                 int group_size, cudaStream_t stream) {
  const int num_groups = tokens * hidden / group_size;
  const int blocks = (num_groups + QUANT_BLOCK - 1) / QUANT_BLOCK;
  quantize_groups_int8<<<blocks, QUANT_BLOCK, 0, stream>>>(in, out, scales, num_groups, group_size);
}
