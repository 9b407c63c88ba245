// RMSNorm bf16, a persistent grid of 64 blocks whose warps take rows from an int counter (atomicAdd); the warp that
// draws the last number puts the counter back to 0 for the next launch.
#include <cuda_bf16.h>
/* kerntune:
args  = ["y: out bf16[R * C]", "x: in bf16[R * C]", "w: in bf16[C]", "next_row: inout i32[1] ~ zeros", "R: i32 = R", "C: i32 = C"]
sizes = [{ R = 512, C = 1024 }, { R = 13, C = 515 }]
grid  = "64"
block = "64"
*/
__global__ void rms_persistent(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int* next_row, int R,
                               int C) {
  const int lane = threadIdx.x % 32, warps = gridDim.x * (blockDim.x / 32);
  for (;;) {
    int r = 0;
    if (lane == 0) {
      r = atomicAdd(next_row, 1);
      if (r == R + warps - 1) atomicExch(next_row, 0);
    }
    r = __shfl_sync(0xffffffffu, r, 0);
    if (r >= R) break;
    const __nv_bfloat16* xr = x + (size_t)r * C;
    float ss = 0.f;
    for (int i = lane; i < C; i += 32) ss += __bfloat162float(xr[i]) * __bfloat162float(xr[i]);
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / C + 1e-6f);
    for (int i = lane; i < C; i += 32)
      y[(size_t)r * C + i] = __float2bfloat16(__bfloat162float(xr[i]) * inv * __bfloat162float(w[i]));
  }
}

void rms_persistent_launch(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, int* next_row, int R,
                           int C, cudaStream_t stream) {
  rms_persistent<<<64, 64, 0, stream>>>(y, x, w, next_row, R, C);
}
