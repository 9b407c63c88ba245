// 2-D block-scaled fp8 quantization (DeepSeek-V3's 128 x 128 weight blocks; Transformer Engine's
// Float8BlockQuantizer with 2-D block scaling): a bf16 matrix x [M, N] is cut into 128 x 128 tiles, each tile gets
// one fp32 scale from its absolute maximum, scale = 448 / amax (1 for an all-zero tile), the tile is written as
// e4m3(x * scale) (satfinite, round to nearest) and the dequantization factor scale_inv = 1 / scale is stored in a
// row-major grid of scales [cdiv(M, 128), cdiv(N, 128)]; edge tiles are partial (masked by M and N).
// Launch: a 2-D grid over the tiles (x the tile column, y the tile row), 256 threads per tile; each thread walks
// the tile with a flat stride of 256 (64 elements), first for the amax (warp shuffles, 8 warp maxima in __shared__
// reduced by warp 0), then again, re-reading x, to quantize. Template <int kTileDim, int kThreads> instantiated
// once by the launcher.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

constexpr float kFp8E4M3Max = 448.0f;

/* kerntune:
args  = ["x: in bf16[M * N]", "q: out u8[M * N]", "scale_inv: out f32[cdiv(M, 128) * cdiv(N, 128)]",
         "M: i32 = M", "N: i32 = N"]
sizes = [{ M = 7168, N = 4096 }, { M = 4, N = 7168 }, { M = 333, N = 2000 }]
grid  = ["cdiv(N, 128)", "cdiv(M, 128)"]
block = 256
*/
template <int kTileDim, int kThreads>
__global__ void __launch_bounds__(kThreads)
    block_scaled_quantize_kernel(const __nv_bfloat16* __restrict__ x, __nv_fp8_e4m3* __restrict__ q,
                                 float* __restrict__ scale_inv, const int M, const int N) {
  const int tile_col = blockIdx.x;
  const int tile_row = blockIdx.y;
  const int row0 = tile_row * kTileDim;
  const int col0 = tile_col * kTileDim;
  constexpr int kWarps = kThreads / 32;
  __shared__ float warp_amax[kWarps];
  __shared__ float tile_scale;

  float amax = 0.f;
  for (int e = threadIdx.x; e < kTileDim * kTileDim; e += kThreads) {
    const int r = row0 + e / kTileDim;
    const int c = col0 + e % kTileDim;
    if (r < M && c < N) amax = fmaxf(amax, fabsf(static_cast<float>(x[static_cast<int64_t>(r) * N + c])));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, offset));
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < kWarps ? warp_amax[threadIdx.x] : 0.f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    if (threadIdx.x == 0) {
      const float scale = v > 0.f ? kFp8E4M3Max / v : 1.f;
      tile_scale = scale;
      scale_inv[tile_row * gridDim.x + tile_col] = 1.f / scale;
    }
  }
  __syncthreads();

  const float scale = tile_scale;
  for (int e = threadIdx.x; e < kTileDim * kTileDim; e += kThreads) {
    const int r = row0 + e / kTileDim;
    const int c = col0 + e % kTileDim;
    if (r < M && c < N) {
      const int64_t idx = static_cast<int64_t>(r) * N + c;
      q[idx] = __nv_fp8_e4m3(static_cast<float>(x[idx]) * scale);
    }
  }
}

// Host side: device pointers, x row-major [M, N]; scale_inv [cdiv(M, 128), cdiv(N, 128)].
void block_scaled_quantize_fp8(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* scale_inv, int M, int N,
                               cudaStream_t stream) {
  constexpr int kTileDim = 128;
  constexpr int kThreads = 256;
  const dim3 grid((N + kTileDim - 1) / kTileDim, (M + kTileDim - 1) / kTileDim);
  block_scaled_quantize_kernel<kTileDim, kThreads><<<grid, kThreads, 0, stream>>>(x, q, scale_inv, M, N);
}
