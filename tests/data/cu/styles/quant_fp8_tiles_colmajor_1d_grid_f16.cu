// Block-wise fp8 (e4m3) quantization with one scale per 128 x 128 tile in DeepGEMM's per_block_cast_to_fp8 form
// (sf = max(amax, 1e-4) / 448, the values times 1 / sf, sf stored), written in another style than the Transformer
// Engine-like corpus variant: fp16 input, the scales column-major [cdiv(cols, 128), cdiv(rows, 128)] (the scales of
// a transposed weight), a 1-D grid over the tiles (the tile rows fastest), 128 threads a tile walking it a warp per
// tile row (each lane 4 columns, 32 apart), amax floored at a #define'd AMAX_FLOOR, clamped to +-448 before the
// saturating conversion; the input read twice (amax pass, quantize pass). The outputs first, the column count
// before the row count.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#define TILE 128
#define AMAX_FLOOR 1e-4f

/* kerntune:
args  = ["sf: out f32[cdiv(cols, 128) * cdiv(rows, 128)]", "out: out u8[rows * cols]", "in: in f16[rows * cols]",
         "cols: i32 = cols", "rows: i32 = rows"]
sizes = [{ rows = 1000, cols = 3000 }, { rows = 256, cols = 7168 }, { rows = 77, cols = 520 }]
grid  = "cdiv(cols, 128) * cdiv(rows, 128)"
block = "128"
*/
__global__ void fp8_tile_quant_colmajor(float* __restrict__ sf, uint8_t* __restrict__ out,
                                        const __half* __restrict__ in, int cols, int rows) {
  const int tiles_m = (rows + TILE - 1) / TILE;
  const int tile_r = blockIdx.x % tiles_m;
  const int tile_c = blockIdx.x / tiles_m;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __shared__ float red[4];
  float amax = 0.f;
  for (int r = warp; r < TILE; r += 4) {
    const int row = tile_r * TILE + r;
    if (row >= rows) break;
    for (int k = 0; k < 4; ++k) {
      const int col = tile_c * TILE + lane + 32 * k;
      if (col < cols) amax = fmaxf(amax, fabsf(__half2float(in[(size_t)row * cols + col])));
    }
  }
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_down_sync(0xffffffffu, amax, o));
  if (lane == 0) red[warp] = amax;
  __syncthreads();
  amax = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  amax = fmaxf(amax, AMAX_FLOOR);
  const float s = amax / 448.0f;
  const float inv_s = 1.0f / s;
  if (threadIdx.x == 0) sf[tile_c * tiles_m + tile_r] = s;
  for (int r = warp; r < TILE; r += 4) {
    const int row = tile_r * TILE + r;
    if (row >= rows) break;
    for (int k = 0; k < 4; ++k) {
      const int col = tile_c * TILE + lane + 32 * k;
      if (col < cols) {
        const size_t idx = (size_t)row * cols + col;
        float v = __half2float(in[idx]) * inv_s;
        v = fminf(fmaxf(v, -448.0f), 448.0f);
        out[idx] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
      }
    }
  }
}
