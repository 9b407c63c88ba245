// Fused residual add + RMSNorm in place on rows of a wider fp16 buffer (the first H of every ld columns, a slice
// of a fused projection's output), the residual contiguous: a warp per row, 4 rows per 128-thread block, the row
// count an argument, the residual first. The sum is rounded to fp16 (__hadd) and stored to the residual; the
// normalized value is rounded to fp16, then multiplied by the weight in fp16 (__hmul) and written back over the
// slice, as vLLM's fused_add_rms_norm treats a non-contiguous input (its input_stride).
#include <cuda_fp16.h>
/* kerntune:
args  = ["res: inout f16[N * H]", "h: inout f16[N * ld]", "g: in f16[H]", "N: i32 = N", "H: i32 = H", "ld: i32 = ld",
         "eps: f32 = 1e-5"]
sizes = [{ N = 256, H = 2048, ld = 6144 }, { N = 7, H = 1001, ld = 1513 }]
grid  = "cdiv(N, 4)"
block = "128"
*/
__global__ void add_rms_strided(__half* __restrict__ res, __half* __restrict__ h, const __half* __restrict__ g, int N,
                                int H, int ld, float eps) {
  const int row = blockIdx.x * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  __half* hr = h + (size_t)row * ld;
  __half* rr = res + (size_t)row * H;
  float ss = 0.f;
  for (int i = lane; i < H; i += 32) {
    const __half z = __hadd(hr[i], rr[i]);
    rr[i] = z;
    const float f = __half2float(z);
    ss += f * f;
  }
  for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / H + eps);
  for (int i = lane; i < H; i += 32) hr[i] = __hmul(__float2half(__half2float(rr[i]) * inv), g[i]);
}

void add_rms_strided_launch(__half* res, __half* h, const __half* g, int N, int H, int ld, float eps,
                            cudaStream_t stream) {
  add_rms_strided<<<(N + 3) / 4, 128, 0, stream>>>(res, h, g, N, H, ld, eps);
}
