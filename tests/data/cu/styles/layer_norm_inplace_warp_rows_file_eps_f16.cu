// LayerNorm in fp16 IN PLACE on the rows (a post-norm encoder's hidden states normalized where they are), a warp per
// row as OneFlow / Apex write short rows: rows grid-strided over blockIdx.x * blockDim.y + threadIdx.y, the warps of
// a block a run-time argument of the launcher (dim3(32, warps)), xor-shuffle sums only; mean, then the centred
// variance (the row read again), then (x - mean) * rstd * weight + shift rounded once to half and written over x;
// eps a constexpr of the file's anonymous namespace (no argument for it); the weights before the rows in the
// argument list, the row count before the row length.
#include <cuda_fp16.h>

namespace {
constexpr float kLayerNormEpsilon = 1e-5f;

__device__ __forceinline__ float warp_all_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
}  // namespace

/* kerntune:
args  = ["weight: in f16[cols]", "shift: in f16[cols]", "data: inout f16[rows * cols]", "rows: i32 = rows",
         "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 768 }, { rows = 37, cols = 1030 }]
grid  = "(rows + 3) / 4"
block = ["32", "4"]
*/
__global__ void warp_layer_norm_inplace_f16(const __half* __restrict__ weight, const __half* __restrict__ shift,
                                            __half* data, int rows, int cols) {
  for (int r = blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += gridDim.x * blockDim.y) {
    __half* row = data + (size_t)r * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += 32) s += __half2float(row[c]);
    const float mu = warp_all_sum(s) / (float)cols;
    float ss = 0.f;
    for (int c = threadIdx.x; c < cols; c += 32) {
      const float d = __half2float(row[c]) - mu;
      ss += d * d;
    }
    const float rstd = rsqrtf(warp_all_sum(ss) / (float)cols + kLayerNormEpsilon);
    for (int c = threadIdx.x; c < cols; c += 32) {
      const float y = (__half2float(row[c]) - mu) * rstd;
      row[c] = __float2half(y * __half2float(weight[c]) + __half2float(shift[c]));
    }
  }
}

void launch_warp_layer_norm_inplace(__half* data, const __half* weight, const __half* shift, int rows, int cols,
                                    int warps_per_block, cudaStream_t stream) {
  const dim3 block(32, warps_per_block);
  warp_layer_norm_inplace_f16<<<(rows + warps_per_block - 1) / warps_per_block, block, 0, stream>>>(
      weight, shift, data, rows, cols);
}
