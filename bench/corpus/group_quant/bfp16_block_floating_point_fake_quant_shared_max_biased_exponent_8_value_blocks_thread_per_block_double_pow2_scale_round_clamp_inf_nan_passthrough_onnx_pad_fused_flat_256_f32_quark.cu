// Block floating point (BFP16) quantize-dequantize in the style of AMD Quark (amd/Quark,
// quark/onnx/operators/custom_ops/src/bfp/cuda/bfp_kernel.cu: BFPCUDAKernel behind LaunchBFPCUDAKernel, run by the
// BFPFixNeuron ONNX Runtime custom op of custom_op_bfp.cc; Quark is AMD's model quantization toolkit for PyTorch and
// ONNX models, BFP16 being the block format of AMD's NPUs), ported as a self-contained kernel + launcher:
//   fp32 in, fp32 out (fake quantization: values snapped to the BFP grid, not packed codes); blocks of block_size = 8
//   consecutive values along the last axis share ONE 8-bit exponent: the largest BIASED exponent field of the block
//   (bits 23..30 of each float; Inf / NaN fields count as 0); with bit_width 16 (1 sign + 8 exponent + 7 mantissa
//   bits) scale = 2^(shared_exp - 127 - (m_bits - 1)) and max_v = 2^(shared_exp - 127 + 1) - scale, computed in
//   DOUBLE (std::pow(2.0, int) as the original writes it), x / scale in double, rounded by the runtime rounding mode
//   (0: std::round, half away from zero; 1: the DPU's rounding, halves of negatives up; 2: Python 3's round half to
//   even), times scale, clamped to [-max_v, max_v]; Inf / NaN inputs pass through unchanged.
//   One thread per block of 8, the block's 8 values walked twice (exponent max, then quantize) straight from global
//   memory; flat launch, 256 threads, ceil(blocks / 256) blocks; the thread index split into (row, block in row) by
//   a division by the row's block count.
// Fixed: the element count (an int truncated from size_t by the launcher) and the block offset axis_index *
// axis_size are 32-bit in Quark, wrong past 2^31 elements: 64-bit here.
// Changed: the BFPFixNeuron op transposes the quantized axis to the end and Pads it with zeros to a multiple of
// block_size before the kernel, then Slices the padding off; that pad / slice is fused here: a short last block of a
// row reads only its real values (the pad's zeros, exponent field 0, never raise the shared exponent) and writes only
// them. The launcher takes a stream instead of the default stream bracketed by cudaDeviceSynchronize; the
// "compiler version" kernel (BFPCUDAKernelCompiler) and BFP-prime are not ported; rounding_mode is an int argument.
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>

enum rounding_mode_enum { STD_ROUND = 0, DPU_ROUND = 1, PY3_ROUND = 2 };

// Get a unsigned value of the biased exponent.
__device__ __forceinline__ uint32_t GetExponent(float v) {
  const uint32_t uint_v = __float_as_uint(v);
  // Shift away mantissa bits.
  return (uint_v & 0x7f800000) >> 23;
}

__device__ __forceinline__ float dpu_round(float x) {
  return ((x < 0) && (x - floorf(x) == 0.5f)) ? ceilf(x) : roundf(x);
}

__device__ __forceinline__ float py3_round(float x) {
  const float x_floor = floorf(x);
  const float diff = x - x_floor;
  if (diff > 0.5f) return x_floor + 1;
  if (diff == 0.5f) return (int)x_floor % 2 == 1 || (int)x_floor % 2 == -1 ? x_floor + 1 : x_floor;
  return x_floor;
}

/* kerntune:
args  = ["input: in f32[rows * cols]", "output: out f32[rows * cols]", "num_threads: i64 = rows * cdiv(cols, 8)",
         "axis_size: i32 = cols", "bit_width: i32 = 16", "block_size: i32 = 8", "rounding_mode: i32 = 0"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 4, cols = 4096 }, { rows = 999, cols = 4099 }]
grid  = "cdiv(rows * cdiv(cols, 8), 256)"
block = 256
*/
__global__ void BFPCUDAKernel(const float* input, float* output, const int64_t num_threads, const int axis_size,
                              const int bit_width, const int block_size, const int rounding_mode) {
  const int64_t index = (int64_t)blockDim.x * blockIdx.x + threadIdx.x;
  if (index >= num_threads) {
    return;
  }

  const int axis_blocks = (axis_size + block_size - 1) / block_size;  // changed: the padded axis' block count
  const int block_index = (int)(index % axis_blocks);
  const int64_t axis_index = index / axis_blocks;

  const int64_t offset = axis_index * axis_size + (int64_t)block_index * block_size;  // fixed: 64-bit
  const int block_len = min(block_size, axis_size - block_index * block_size);        // changed: fused pad
  // Loop over bounding box to find shared exponent
  uint32_t shared_exp = 0;
  for (int i = 0; i < block_len; i++) {
    uint32_t exp = GetExponent(input[offset + i]);
    if (exp == 0xff) {
      exp = 0;
    }
    if (exp > shared_exp) {
      shared_exp = exp;
    }
  }

  // Minus 127 to get unbiased value.
  const int shared_exp_value = static_cast<int>(shared_exp) - 127;
  // 1 sign bit, 8 exp bits.
  const int m_bits = bit_width - 9;
  const double scale = pow(2.0, shared_exp_value - (m_bits - 1));
  const double max_v = pow(2.0, shared_exp_value + 1) - scale;
  for (int i = 0; i < block_len; i++) {
    // Output +-0/NaN/Inf as is.
    const int64_t idx = offset + i;
    const float x = input[idx];
    if (GetExponent(x) == 0xff) {
      output[idx] = x;
    } else {
      const double scaled_x = x / scale;
      float rounded_scaled_x = 0.0f;
      switch (rounding_mode) {
        case STD_ROUND:
          rounded_scaled_x = round(scaled_x);
          break;
        case DPU_ROUND:
          rounded_scaled_x = dpu_round(scaled_x);
          break;
        case PY3_ROUND:
          rounded_scaled_x = py3_round(scaled_x);
          break;
        default:
          break;
      }
      output[idx] = fmax(-max_v, fmin(rounded_scaled_x * scale, max_v));
    }
  }
}

// input, output: device fp32, n elements, rows of axis_size along the quantized (last) axis; bit_width 16 for BFP16
// (9 < bit_width <= 32); block_size 8; rounding_mode 0 / 1 / 2.
void LaunchBFPCUDAKernel(const float* input, float* output, const int64_t n, const int axis_size, const int bit_width,
                         const int block_size, const int rounding_mode, cudaStream_t stream) {
  assert(axis_size > 0 && n % axis_size == 0);
  assert(bit_width > 9 && block_size > 0 && rounding_mode >= STD_ROUND && rounding_mode <= PY3_ROUND);
  const int64_t threads = n / axis_size * ((axis_size + block_size - 1) / block_size);
  if (threads == 0) return;

  const int threads_per_block = 256;
  const int blocks = static_cast<int>((threads + threads_per_block - 1) / threads_per_block);
  BFPCUDAKernel<<<blocks, threads_per_block, 0, stream>>>(input, output, threads, axis_size, bit_width, block_size,
                                                         rounding_mode);
}
