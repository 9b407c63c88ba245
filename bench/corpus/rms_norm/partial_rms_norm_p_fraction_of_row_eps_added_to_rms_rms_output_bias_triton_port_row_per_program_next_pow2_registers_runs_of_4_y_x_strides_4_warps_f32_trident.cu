// RMSNorm forward as Trident writes it (kakaobrain/trident, trident/kernel/rms_norm.py RMSNorm.forward launched by
// trident/operation/rms_norm.py RMSNorm.__forward, behind trident.RMSNorm / trident.function.rms_norm; Trident is
// Kakao Brain's library of Triton kernels for PyTorch training and inference), written as the CUDA port of that
// Triton program, fp32:
//   the PARTIAL RMSNorm of Zhang & Sennrich (pRMSNorm): the root mean square is estimated from the first
//   partial_size columns of the row only (partial_size = x_size * p for p in [0, 1], else the whole row):
//     rms    = sqrt(sum(x[:partial_size]^2) / partial_size)
//     output = x / (rms + eps) * weight + bias        (eps added to the RMS, OUTSIDE the square root)
//   over the WHOLE row; the per-row rms [y_size] is an OUTPUT (saved for the backward); bias is optional (the module's
//   bias=True; nullptr skips it). Argument order (output, rms, input, y_size, x_size, y_stride, x_stride,
//   partial_size, weight, bias, eps), the input and output addressed through (y_stride, x_stride) (Trident's
//   util.size_and_stride), weight and bias contiguous.
//   The program: one row per program, grid (y_size,); x_block_size = triton.next_power_of_2(x_size) columns loaded
//   at once through a block pointer (boundary-checked), kept in fp32 registers; the sum over the row is tl.sum.
//   num_warps is not given, so Triton's default of 4 warps (128 threads). In CUDA terms: template <x_block_size>
//   from a host switch over 128 .. 16384, each thread holding x_block_size / 128 columns in runs of 4 consecutive
//   columns (Triton's blocked layout for 32-bit data: column = run * 512 + thread * 4 + k), tl.sum as a xor
//   butterfly in each warp plus the four warp sums through shared memory; true division, sqrtf, fp32 throughout.
// Changed: the autograd Function became a C++ launcher taking p and a stream; partial_size is computed on the host
// as int(x_size * p) (the reference pRMSNorm's partial_size = int(d_x * p)), Trident hands x_size * p to the
// kernel's int32 argument. No bug found.
#include <cuda_runtime.h>
#include <cassert>
#include <cstdint>

namespace trident {

constexpr int kNumWarps = 4;  // Triton's default num_warps
constexpr int kNumThreads = kNumWarps * 32;

// tl.sum(v, 1) over the program's one row: every thread gets the total
__device__ __forceinline__ float program_sum(float v, float* warp_sums) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, mask);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNumWarps; ++w) total += warp_sums[w];
  return total;
}

/* kerntune:
args  = ["output_ptr: out f32[y * x]", "rms_ptr: out f32[y]", "input_ptr: in f32[y * x]", "y_size: i32 = y",
         "x_size: i32 = x", "y_stride: i32 = x", "x_stride: i32 = 1", "partial_size: i32 = P",
         "weight_ptr: in f32[x]", "bias_ptr: in f32[x]", "eps: f32 = 1e-5"]
sizes = [{ y = 8192, x = 4096, P = 4096 }, { y = 4, x = 4096, P = 4096 }, { y = 999, x = 3001, P = 187 }]
grid  = "y"
block = 128
template_args = ["4096"]
*/
template <int x_block_size>
__global__ void rms_norm_forward(float* output_ptr, float* rms_ptr, const float* input_ptr, int y_size, int x_size,
                                 int y_stride, int x_stride, int partial_size, const float* weight_ptr,
                                 const float* bias_ptr, float eps) {
  // columns per thread: runs of 4 consecutive columns, kNumThreads * 4 = 512 columns apart
  constexpr int kRun = 4;
  constexpr int kPerThread = x_block_size >= kNumThreads * kRun ? x_block_size / kNumThreads : kRun;
  constexpr int kRuns = kPerThread / kRun;
  __shared__ float warp_sums[kNumWarps];

  const int y_offset = blockIdx.x;  // tl.program_id(0)
  if (y_offset >= y_size) return;
  const float* input_row = input_ptr + static_cast<int64_t>(y_offset) * y_stride;
  float* output_row = output_ptr + static_cast<int64_t>(y_offset) * y_stride;

  // input = tl.load(input_block_ptr, boundary_check=(1,))
  float input[kPerThread];
  float square_sum = 0.0f;
#pragma unroll
  for (int r = 0; r < kRuns; ++r) {
#pragma unroll
    for (int k = 0; k < kRun; ++k) {
      const int col = r * kNumThreads * kRun + threadIdx.x * kRun + k;
      const bool in_row = col < x_size && col < x_block_size;
      input[r * kRun + k] = in_row ? input_row[static_cast<int64_t>(col) * x_stride] : 0.0f;
      // partial_input = tl.where(tl.arange(0, x_block_size) < partial_size, input, 0)
      const float partial_input = col < partial_size ? input[r * kRun + k] : 0.0f;
      square_sum += partial_input * partial_input;
    }
  }
  const float rms = sqrtf(program_sum(square_sum, warp_sums) / partial_size);

#pragma unroll
  for (int r = 0; r < kRuns; ++r) {
#pragma unroll
    for (int k = 0; k < kRun; ++k) {
      const int col = r * kNumThreads * kRun + threadIdx.x * kRun + k;
      if (col < x_size && col < x_block_size) {
        const float norm = input[r * kRun + k] / (rms + eps);
        float output = norm * weight_ptr[col];
        if (bias_ptr != nullptr) output += bias_ptr[col];
        output_row[static_cast<int64_t>(col) * x_stride] = output;
      }
    }
  }
  if (threadIdx.x == 0) rms_ptr[y_offset] = rms;
}

template <int x_block_size>
static void launch_forward(float* output, float* rms, const float* input, int y_size, int x_size, int y_stride,
                           int x_stride, int partial_size, const float* weight, const float* bias, float eps,
                           cudaStream_t stream) {
  const dim3 grid(y_size);  // def grid(meta): return (y_size,)
  rms_norm_forward<x_block_size><<<grid, kNumThreads, 0, stream>>>(output, rms, input, y_size, x_size, y_stride,
                                                                   x_stride, partial_size, weight, bias, eps);
}

// input, output: [y_size, x_size] fp32 at (y_stride, x_stride); rms: [y_size] fp32 (output); weight: [x_size];
// bias: [x_size] or nullptr. p in [0, 1] selects partial RMSNorm, any other value the whole row. Device pointers.
// (RMSNorm.__forward with the grid and the constexprs it passes)
void rms_norm(float* output, float* rms, const float* input, int y_size, int x_size, int y_stride, int x_stride,
              float p, const float* weight, const float* bias, float eps, cudaStream_t stream) {
  if (y_size == 0 || x_size == 0) return;
  const int partial_size = (p < 0.0f || p > 1.0f) ? x_size : static_cast<int>(x_size * p);
  assert(partial_size > 0);
  int x_block_size = 1;
  while (x_block_size < x_size) x_block_size <<= 1;  // triton.next_power_of_2(x_size)
  switch (x_block_size) {
    case 1: case 2: case 4: case 8: case 16: case 32: case 64: case 128:
      launch_forward<128>(output, rms, input, y_size, x_size, y_stride, x_stride, partial_size, weight, bias, eps,
                          stream);
      break;
    case 256:
      launch_forward<256>(output, rms, input, y_size, x_size, y_stride, x_stride, partial_size, weight, bias, eps,
                          stream);
      break;
    case 512:
      launch_forward<512>(output, rms, input, y_size, x_size, y_stride, x_stride, partial_size, weight, bias, eps,
                          stream);
      break;
    case 1024:
      launch_forward<1024>(output, rms, input, y_size, x_size, y_stride, x_stride, partial_size, weight, bias, eps,
                           stream);
      break;
    case 2048:
      launch_forward<2048>(output, rms, input, y_size, x_size, y_stride, x_stride, partial_size, weight, bias, eps,
                           stream);
      break;
    case 4096:
      launch_forward<4096>(output, rms, input, y_size, x_size, y_stride, x_stride, partial_size, weight, bias, eps,
                           stream);
      break;
    case 8192:
      launch_forward<8192>(output, rms, input, y_size, x_size, y_stride, x_stride, partial_size, weight, bias, eps,
                           stream);
      break;
    case 16384:
      launch_forward<16384>(output, rms, input, y_size, x_size, y_stride, x_stride, partial_size, weight, bias, eps,
                            stream);
      break;
    default:
      assert(false && "rms_norm: rows over 16384 columns are not instantiated");
  }
}

}  // namespace trident
