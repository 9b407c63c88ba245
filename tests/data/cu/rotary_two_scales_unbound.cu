// Rotary fp16 in place with no cache, NTK- and linearly scaled: the frequency base is the product of two float
// arguments and the angle is divided by a third, not a form of the rotary expert's angle: no binding is offered.
#include <cuda_fp16.h>
/* kerntune:
args  = ["pos: in i32[T] ~ randint(0, 4096)", "q: inout f16[T * H * 64]", "base: f32 = 10000.0",
         "ntk: f32 = 1.0", "linear: f32 = 1.0", "H: i32 = H"]
sizes = [{ T = 64, H = 8 }, { T = 9, H = 5 }]
grid  = "T"
block = "128"
*/
__global__ void rope_two_scales(const int* pos, __half* q, float base, float ntk, float linear, int H) {
  for (int i = threadIdx.x; i < H * 32; i += blockDim.x) {
    const int h = i / 32, j = i % 32;
    __half* v = q + ((size_t)blockIdx.x * H + h) * 64;
    const float theta = (float)pos[blockIdx.x] * powf(base * ntk, -(float)(2 * j) / 64.0f) / linear;
    const float c = cosf(theta), s = sinf(theta);
    const float x0 = __half2float(v[j]), x1 = __half2float(v[j + 32]);
    v[j] = __float2half(x0 * c - x1 * s);
    v[j + 32] = __float2half(x1 * c + x0 * s);
  }
}
