// Softmax as Hidet writes its CUDA schedule (hidet-org/hidet, python/hidet/graph/ops/softmax.py
// SoftmaxTask.implement_cuda, a Hidet Script kernel for the softmax operator of its graph compiler), written as CUDA
// C++. Softmax over ANY axis: the tensor is seen as [outer, axis, inner] and every index of the reduced shape
// (outer * inner of them, row-major as TaskMapping.row_major) gets ONE WARP: block_dim = 32, grid_dim = outer *
// inner; element k of the axis is at (o * axis + k) * inner + i, so for inner > 1 the 32 lanes read with a stride of
// inner. Each lane keeps its ceil(axis / 32) values in a register array temp[outer_extent] (values k * 32 + lane);
// the max starts from -FLT_MAX (-dtype.max_value) and the warp reduction is shfl_down over 16 .. 1 on the active mask
// followed by a shfl from lane 0 (hidet's warp_reduce); temp[k] = exp(temp[k] - max) in registers, the sum reduced
// the same way, y = temp[k] / sum. fp32 (the dtype of the graph), argument order (xs, ys).
// Changed: hidet bakes the whole shape into the generated kernel; here outer / axis / inner are arguments and
// outer_extent a template parameter picked by the host from a ladder (1, 2, 4, 8, 16, 32; 32 = axis up to 1024).
// Fixed: the exp loop ran over register slots past the axis that were never loaded (uninitialized, then dropped by the
// guarded sum); those slots are now skipped. Sizes: 16384 rows x 1024 (last axis); 8 rows x 1000; a middle axis,
// [37, 999, 3]. atol 1e-6: the probabilities are ~1 / axis.
#include <cuda_runtime.h>
#include <cfloat>
#include <cstdint>

namespace hidet_ops {

__device__ __forceinline__ float warp_reduce_max(float v) {
  const unsigned mask = __activemask();
  for (int delta = 16; delta >= 1; delta >>= 1) v = fmaxf(v, __shfl_down_sync(mask, v, delta));
  return __shfl_sync(mask, v, 0);
}

__device__ __forceinline__ float warp_reduce_sum(float v) {
  const unsigned mask = __activemask();
  for (int delta = 16; delta >= 1; delta >>= 1) v = v + __shfl_down_sync(mask, v, delta);
  return __shfl_sync(mask, v, 0);
}

/* kerntune:
args  = ["xs: in f32[outer * axis * inner]", "ys: out f32[outer * axis * inner]", "outer: i32 = outer",
         "axis_extent: i32 = axis", "inner: i32 = inner"]
sizes = [{ outer = 16384, axis = 1024, inner = 1 }, { outer = 8, axis = 1000, inner = 1 },
         { outer = 37, axis = 999, inner = 3 }]
grid  = ["outer * inner", 1, 1]
block = 32
atol  = 1e-6
template_args = ["32"]
*/
template <int OUTER_EXTENT>
__global__ void softmax_kernel(const float* __restrict__ xs, float* __restrict__ ys, const int outer,
                               const int axis_extent, const int inner) {
  constexpr int warp_size = 32;
  // row-major worker -> task over the reduced shape [outer, inner]
  const int o = blockIdx.x / inner;
  const int i = blockIdx.x % inner;
  const int64_t base = (int64_t)o * axis_extent * inner + i;

  float temp[OUTER_EXTENT];
  float rv = -FLT_MAX;

  // maximum along the axis
#pragma unroll
  for (int k = 0; k < OUTER_EXTENT; k++) {
    const int idx = threadIdx.x + k * warp_size;
    if (idx < axis_extent) {
      temp[k] = xs[base + (int64_t)idx * inner];
      rv = fmaxf(rv, temp[k]);
    }
  }
  rv = warp_reduce_max(rv);

  // exp
#pragma unroll
  for (int k = 0; k < OUTER_EXTENT; k++) {
    const int idx = threadIdx.x + k * warp_size;
    if (idx < axis_extent) temp[k] = expf(temp[k] - rv);
  }

  // sum
  rv = 0.0f;
#pragma unroll
  for (int k = 0; k < OUTER_EXTENT; k++) {
    const int idx = threadIdx.x + k * warp_size;
    if (idx < axis_extent) rv += temp[k];
  }
  rv = warp_reduce_sum(rv);

#pragma unroll
  for (int k = 0; k < OUTER_EXTENT; k++) {
    const int idx = threadIdx.x + k * warp_size;
    if (idx < axis_extent) ys[base + (int64_t)idx * inner] = temp[k] / rv;
  }
}

// x, y: [outer, axis_extent, inner] fp32 (device); softmax over the middle dimension. Returns -1 if axis_extent >
// 1024 (hidet falls back to its auto-scheduler there).
int softmax(const float* x, float* y, int outer, int axis_extent, int inner, cudaStream_t stream) {
  const int warp_size = 32;
  const int outer_extent = (axis_extent + warp_size - 1) / warp_size;
  const dim3 grid(outer * inner);
  const dim3 block(warp_size);
  if (outer_extent <= 1) {
    softmax_kernel<1><<<grid, block, 0, stream>>>(x, y, outer, axis_extent, inner);
  } else if (outer_extent <= 2) {
    softmax_kernel<2><<<grid, block, 0, stream>>>(x, y, outer, axis_extent, inner);
  } else if (outer_extent <= 4) {
    softmax_kernel<4><<<grid, block, 0, stream>>>(x, y, outer, axis_extent, inner);
  } else if (outer_extent <= 8) {
    softmax_kernel<8><<<grid, block, 0, stream>>>(x, y, outer, axis_extent, inner);
  } else if (outer_extent <= 16) {
    softmax_kernel<16><<<grid, block, 0, stream>>>(x, y, outer, axis_extent, inner);
  } else if (outer_extent <= 32) {
    softmax_kernel<32><<<grid, block, 0, stream>>>(x, y, outer, axis_extent, inner);
  } else {
    return -1;
  }
  return 0;
}

}  // namespace hidet_ops
