// Per-group asymmetric uint8 quantization with a float zero point stored apart (ggml's q4_1 / q8_1 form: the
// minimum kept in fp16 beside an fp32 scale, the values quantized with the fp32 minimum): fp32 input, a thread per
// group in a grid-stride loop, the range divided by 255 with no eps, values multiplied by the reciprocal,
// q = clamp(rint((x - min) * (1 / scale)), 0, 255).
#include <cuda_fp16.h>
#include <stdint.h>

/* kerntune:
args  = ["x: in f32[rows * gsz]", "mins: out f16[rows]", "q: out u8[rows * gsz]", "scales: out f32[rows]",
         "rows: i32 = rows", "gsz: i32 = gsz"]
sizes = [{ rows = 65536, gsz = 32 }, { rows = 77, gsz = 32 }, { rows = 3001, gsz = 64 }]
grid  = "cdiv(rows, 128)"
block = "128"
*/
__global__ void quant_min_zeros(const float* __restrict__ x, __half* __restrict__ mins, uint8_t* __restrict__ q,
                                float* __restrict__ scales, int rows, int gsz) {
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) {
    const float* xr = x + (long long)r * gsz;
    float mn = xr[0], mx = xr[0];
    for (int i = 1; i < gsz; ++i) {
      mn = fminf(mn, xr[i]);
      mx = fmaxf(mx, xr[i]);
    }
    const float d = (mx - mn) / 255.0f;
    const float inv = 1.0f / d;
    scales[r] = d;
    mins[r] = __float2half(mn);
    for (int i = 0; i < gsz; ++i) {
      const float level = rintf((xr[i] - mn) * inv);
      q[(long long)r * gsz + i] = (uint8_t)fminf(fmaxf(level, 0.0f), 255.0f);
    }
  }
}
