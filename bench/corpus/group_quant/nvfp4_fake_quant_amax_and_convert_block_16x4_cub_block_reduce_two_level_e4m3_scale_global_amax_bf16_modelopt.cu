// Block-wise NVFP4 fake quantization in the style of NVIDIA TensorRT Model Optimizer (modelopt,
// modelopt/torch/quantization/src/tensor_quant_mx.cu: amax_and_convert_kernel behind fused_amax_convert, the
// fused "dynamic block quant" path of its TensorQuantizer for MX / NVFP4 formats), bf16 in and out:
//   x, y [rows, cols] bf16, y = dequant(quant(x)) (FAKE quant: y has x's dtype, at::empty_like(x))
//   blocks of blocksize = 16 consecutive elements along the last dim; rows whose length is not a multiple of
//   16 are FAKE-PADDED: padded_cols = cols + (16 - cols % 16) (which adds a whole block when cols % 16 == 0),
//   padding reads as 0 and is never written
//   ONE THREAD PER ELEMENT: block (THREAD_X = blocksize, THREAD_Y = blocks_per_cta = 4), each row of threadIdx.y
//   one quantization block; grid ceil(rows * padded_cols / 64); the block's amax by cub::BlockReduce<float, 16>
//   (a 16-lane logical warp) with one TempStorage per threadIdx.y, thread x == 0 publishing it through a
//   __shared__ amax_smem[THREAD_Y] and a __syncthreads
//   NVFP4 two-level scaling (compute_scale_with_global): a per-tensor global_amax; local_unscale = amax / 6;
//   two_level_scale = 448 * (6 / global_amax) in double; the block scale is rounded to FP8 E4M3:
//   local_unscale_q = e4m3(local_unscale * two_level_scale) / two_level_scale; scale = 1 / local_unscale_q;
//   each element: sign * e2m1(|x| * scale) * unscale, E2M1 rounded to nearest (ties to even) on
//   {0, 0.5, 1, 1.5, 2, 3, 4, 6}, saturating; an invalid amax (0, inf, nan) gives scale = unscale = 1
//   template <T, T_y, THREAD_X, THREAD_Y> (spec = <__nv_bfloat16, __nv_bfloat16, 16, 4>), host macros
//   dispatching blocksize 8 / 16 / 32 (three instantiations; modelopt's compute_max takes a cub::WarpReduce path for
//   32-wide blocks, only its block-reduce path is kept here)
// modelopt's Types enum, get_format_max and convert_to_types come from its header; the two conversions used here
// (E2M1 and E4M3, via cuda_fp8.h with saturation) are written as our own small helpers, and the torch wrapper is
// replaced by a plain launcher with a stream. Fixed: threads of a 4-block CTA past the padded element count
// RETURNED before the block reduction's __syncthreads (a barrier not reached by every thread of the block); they
// now take part with a zero and store nothing. The sign in quantize() was left uninitialized for x == 0; it is 0
// now (the product was 0 either way).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include <cub/cub.cuh>
#include <cuda/functional>

enum class Types : int { E2M1 = 0, E4M3 = 1, E5M2 = 2, E8M0 = 3, BF16 = 4 };

namespace {

__device__ __host__ __inline__ float get_format_max(const Types format) {
  switch (format) {
    case Types::E2M1: return 6.f;
    case Types::E4M3: return 448.f;
    case Types::E5M2: return 57344.f;
    default: return FLT_MAX;
  }
}

// round |x| onto the E2M1 grid, saturating at 6
__device__ __inline__ float round_e2m1(float xabs) {
  if (xabs > 5.f) return 6.f;
  if (xabs >= 3.5f) return 4.f;
  if (xabs > 2.5f) return 3.f;
  if (xabs >= 1.75f) return 2.f;
  if (xabs > 1.25f) return 1.5f;
  if (xabs >= 0.75f) return 1.f;
  if (xabs > 0.25f) return 0.5f;
  return 0.f;
}

__device__ __inline__ float convert_to_types(const float x, const Types format) {
  switch (format) {
    case Types::E2M1: return round_e2m1(x);
    case Types::E4M3: {
      __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
      return static_cast<float>(__half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3)));
    }
    default: return x;
  }
}

__device__ __inline__ float quantize(const float x, const float scale, const float unscale, const Types format) {
  // Get the sign.
  int sign = 0;
  if (x < 0.0) sign = -1;
  if (x > 0.0) sign = 1;
  float xabs = fabsf(x);
  xabs = xabs * scale;                       // scale
  xabs = convert_to_types(xabs, format);     // quantize
  xabs = xabs * unscale;                     // unscale
  return sign * xabs;
}

__device__ __inline__ void compute_scale(const float amax, const Types format, const Types scale_format,
                                         float* scale_out, float* unscale_out) {
  if (amax == 0 || isinf(amax) || isnan(amax)) {
    *scale_out = 1.f;
    *unscale_out = 1.f;
    return;
  }
  const float emax = get_format_max(format);
  double scale = emax / amax;
  double inv_scale = convert_to_types(1. / scale, scale_format);
  scale = 1. / inv_scale;
  *scale_out = scale;
  *unscale_out = inv_scale;
}

__device__ __inline__ void compute_scale_with_global(const float global_amax, const float local_amax,
                                                     const Types format, const Types scale_format, float* scale_out,
                                                     float* unscale_out) {
  bool local_amax_invalid = local_amax == 0 || isinf(local_amax) || isnan(local_amax);
  bool global_amax_invalid = global_amax == 0 || isinf(global_amax) || isnan(global_amax);
  if (local_amax_invalid || global_amax_invalid) {
    *scale_out = 1.f;
    *unscale_out = 1.f;
    return;
  }
  const float elem_format_max = get_format_max(format);
  const float scale_format_max = get_format_max(scale_format);

  const float local_unscale = local_amax / elem_format_max;
  // in double: scale_format_max * (elem_format_max / global_amax) can overflow a float for wide formats
  const double two_level_scale = static_cast<double>(scale_format_max) * (elem_format_max / global_amax);
  const double local_unscale_q =
      convert_to_types(static_cast<float>(local_unscale * two_level_scale), scale_format) / two_level_scale;
  *scale_out = 1. / local_unscale_q;
  *unscale_out = static_cast<float>(local_unscale_q);
}

template <int THREAD_X, int THREAD_Y>
__device__ float compute_max_block(const float x, const float clamp = FLT_MAX) {
  float xabs = fabsf(x);
  xabs = (xabs > clamp) ? clamp : xabs;

  typedef cub::BlockReduce<float, THREAD_X> BlockReduce;
  __shared__ typename BlockReduce::TempStorage temp_storage[THREAD_Y];
  float amax = BlockReduce(temp_storage[threadIdx.y]).Reduce(xabs, ::cuda::maximum<float>{});  // cub::Max() before CCCL 3

  __shared__ float amax_smem[THREAD_Y];
  if (threadIdx.x == 0) amax_smem[threadIdx.y] = amax;
  __syncthreads();
  return amax_smem[threadIdx.y];
}

}  // namespace

/* kerntune:
args  = ["x: in bf16[rows * cols]", "y: out bf16[rows * cols]", "n: i64 = rows * (cols + 16 - cols % 16)",
         "blocksize: i32 = 16", "actual_cols: i32 = cols", "padded_cols: i32 = cols + 16 - cols % 16",
         "format: i32 = 0", "scale_format: i32 = 1", "global_amax: in f32[1] ~ uniform(6, 8)",
         "per_channel_scaling: u8 = 0", "ncols: i32 = cols"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 4, cols = 7168 }, { rows = 999, cols = 1001 }]
grid  = "cdiv(rows * (cols + 16 - cols % 16), 64)"
block = [16, 4]
template_args = ["__nv_bfloat16", "__nv_bfloat16", "16", "4"]
*/
template <typename T, typename T_y, int THREAD_X, int THREAD_Y>
__global__ void amax_and_convert_kernel(const T* x, T_y* y, const int64_t n, const int blocksize,
                                        const int actual_cols, const int padded_cols, Types format,
                                        Types scale_format, const float* global_amax, const bool per_channel_scaling,
                                        const int ncols) {
  // map thread -> element
  const uint64_t block_idx = (uint64_t)blockIdx.x * blockDim.y + threadIdx.y;
  const int thread_id = threadIdx.x;

  // unique id in the padded matrix
  const int64_t idx = block_idx * blocksize + thread_id;
  const int blocks_per_row = padded_cols / blocksize;
  // past the padded matrix: take part in the reduction, write nothing
  const bool out_of_range = idx >= n;

  float scale = 1.f, unscale = 1.f;

  // row and col in terms of the padded size
  const int64_t row = block_idx / blocks_per_row;
  const int block_in_row = block_idx % blocks_per_row;
  const int col = block_in_row * blocksize + thread_id;
  // real or padded element
  const bool in_padding = out_of_range || col >= actual_cols;
  const size_t real_idx = row * actual_cols + col;

  // read either the real or a padded (zero) value
  float thread_val = in_padding ? 0.f : static_cast<float>(x[real_idx]);
  float block_amax = compute_max_block<THREAD_X, THREAD_Y>(thread_val);

  if (global_amax) {
    int64_t global_idx = per_channel_scaling ? idx / ncols : 0;
    float global_amax_val = global_amax[global_idx];
    compute_scale_with_global(global_amax_val, block_amax, format, scale_format, &scale, &unscale);
  } else {
    compute_scale(block_amax, format, scale_format, &scale, &unscale);
  }

  // a thread not holding a real value has nothing to output
  if (in_padding) return;

  y[real_idx] = static_cast<T_y>(quantize(thread_val, scale, unscale, format));
}

int pad_dim_to_blocksize(const int dim, const int bs) { return dim + (bs - (dim % bs)); }

#define DISPATCH_FUSED_AMAX_KERNEL(T, TX, TY)                                                             \
  amax_and_convert_kernel<T, T, TX, TY><<<blocks, block, 0, stream>>>(x, y, n, blocksize, actual_cols,      \
                                                                      padded_cols, format, scale_format,    \
                                                                      global_amax, per_channel_scaling, cols)

// x, y: device [rows, cols] bf16; global_amax: device [1] f32 (the tensor's amax), or nullptr for single-level
// scaling. NVFP4: blocksize 16, format E2M1, scale_format E4M3.
void fused_amax_convert(const __nv_bfloat16* x, __nv_bfloat16* y, int64_t rows, int cols, const int blocksize,
                        Types format, Types scale_format, const float* global_amax, cudaStream_t stream) {
  const bool per_channel_scaling = false;
  // handle partial blocks by fake-padding to full blocks
  const int actual_cols = cols;
  const int padded_cols = pad_dim_to_blocksize(actual_cols, blocksize);
  const int64_t n = rows * padded_cols;

  const int blocks_per_cta = 4;
  const dim3 block(blocksize, blocks_per_cta);
  const int blocks = (int)((n + blocksize * blocks_per_cta - 1) / (blocksize * blocks_per_cta));

  if (blocksize == 8) {
    DISPATCH_FUSED_AMAX_KERNEL(__nv_bfloat16, 8, 4);
  } else if (blocksize == 16) {
    DISPATCH_FUSED_AMAX_KERNEL(__nv_bfloat16, 16, 4);
  } else if (blocksize == 32) {
    DISPATCH_FUSED_AMAX_KERNEL(__nv_bfloat16, 32, 4);
  } else {
    throw std::invalid_argument("Blocksize for fused call must be one of {8, 16, 32}");
  }
}

#undef DISPATCH_FUSED_AMAX_KERNEL
