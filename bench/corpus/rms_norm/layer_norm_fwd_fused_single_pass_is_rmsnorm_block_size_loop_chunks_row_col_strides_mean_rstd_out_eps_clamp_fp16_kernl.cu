// RMSNorm as Kernl writes it (ELS-RD/kernl, src/kernl/implementations/layer_norm.py: _layer_norm_fwd_fused_single_pass
// with IS_RMSNORM = True behind layer_norm(..., use_rms_norm=True), the kernel Kernl swaps into T5 / Llama-style
// models), ported from Triton to CUDA C++. fp16 in and out (the autograd Function casts inputs to fp16), fp16 weight,
// output and input addressed through row AND column strides (output_row_stride, output_col_stride, a_row_stride,
// a_col_stride); one program per row, BLOCK_SIZE = min(max(next_pow2(N), 128), 4096) columns per step as the host
// picks it (MAX_FUSED_SIZE = 65536 / 2 bytes, capped at 4096), num_warps = min(max(BLOCK_SIZE / 256, 1), 8); the
// kernel LOOPS over the row in BLOCK_SIZE chunks (masked tail): pass 1 sums a * a in fp32 (tl.sum per chunk), var /= N,
// rstd = 1 / sqrt(var + eps); mean (0 for RMSNorm) and rstd stored per row as fp32 for the backward; pass 2 re-reads
// the input, a_hat = (a - mean) * rstd, out = a_hat * weight in fp32 (Triton promotes fp32 * fp16 to fp32) and one
// rounding to fp16 at the store. HAS_BIAS false (the bias branch kept). The host clamps eps to at least 1.6e-5 for
// fp16 inputs. The Triton blocked layout written as each of the num_warps * 32 threads owning BLOCK_SIZE / (num_warps
// * 32) consecutive columns of a chunk, tl.sum as a warp butterfly plus shared warp partials.
// Changed: the Triton launch written as a C++ launcher with a template <BLOCK_SIZE> switch (spec = <4096>, 8 warps;
// every size set has N > 2048); argument order kept (output, a, weight, bias, mean, rstd, four strides, N, eps).
// No bug found (the Welford LayerNorm branch of the same kernel is not instantiated). Sizes 16384 x 4096, 4 x 5120
// (two chunks), 999 x 4099 (masked tail chunk).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

__host__ __device__ constexpr int kernl_num_warps(int block_size) {
  return block_size / 256 < 1 ? 1 : (block_size / 256 > 8 ? 8 : block_size / 256);
}

/* kerntune:
args  = ["output_ptr: out f16[M * N]", "a_ptr: in f16[M * N]", "weight_ptr: in f16[N]", "bias_ptr: in f16[N]",
         "mean_ptr: out f32[M]", "rstd_ptr: out f32[M]", "output_row_stride: i64 = N", "output_col_stride: i64 = 1",
         "a_row_stride: i64 = N", "a_col_stride: i64 = 1", "n_cols: i32 = N", "eps: f32 = 1.6e-5"]
sizes = [{ M = 16384, N = 4096 }, { M = 4, N = 5120 }, { M = 999, N = 4099 }]
grid  = "M"
block = 256
template_args = ["4096", "false", "true"]
*/
template <int BLOCK_SIZE, bool HAS_BIAS, bool IS_RMSNORM>
__global__ void layer_norm_fwd_fused_single_pass(half* __restrict__ output_ptr, const half* __restrict__ a_ptr,
                                                 const half* __restrict__ weight_ptr,
                                                 const half* __restrict__ bias_ptr, float* __restrict__ mean_ptr,
                                                 float* __restrict__ rstd_ptr, int64_t output_row_stride,
                                                 int64_t output_col_stride, int64_t a_row_stride,
                                                 int64_t a_col_stride, int n_cols, float eps) {
  constexpr int kNumWarps = kernl_num_warps(BLOCK_SIZE);
  constexpr int kThreads = kNumWarps * 32;
  constexpr int kSizePerThread = BLOCK_SIZE / kThreads;
  static_assert(IS_RMSNORM, "only the RMSNorm branch is written here");

  // position of elements processed by this program
  const int64_t row_idx = blockIdx.x;
  const int64_t a_row_off = row_idx * a_row_stride;
  const int block_range_off = threadIdx.x * kSizePerThread;

  __shared__ float warp_sums[kNumWarps];

  // pass 1: sum of squares
  float mean = 0.0f;
  float var = 0.0f;
  for (int block_n_start_idx = 0; block_n_start_idx < n_cols; block_n_start_idx += BLOCK_SIZE) {
    float chunk = 0.0f;
#pragma unroll
    for (int k = 0; k < kSizePerThread; ++k) {
      const int col_off = block_n_start_idx + block_range_off + k;
      // float32 is used to avoid overflow because of the square operation
      const float a = col_off < n_cols ? __half2float(a_ptr[a_row_off + col_off * a_col_stride]) : 0.0f;
      chunk += a * a;
    }
    // tl.sum(a * a, axis=0)
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) chunk += __shfl_xor_sync(0xffffffffu, chunk, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = chunk;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kNumWarps; ++w) total += warp_sums[w];
    __syncthreads();
    var += total;
  }

  var /= n_cols;
  const float rstd = 1.0f / sqrtf(var + eps);

  // write-back mean/rstd for backward pass
  if (threadIdx.x == 0) {
    mean_ptr[row_idx] = mean;
    rstd_ptr[row_idx] = rstd;
  }

  // pass 2: multiply by weight and add bias
  for (int block_n_start_idx = 0; block_n_start_idx < n_cols; block_n_start_idx += BLOCK_SIZE) {
#pragma unroll
    for (int k = 0; k < kSizePerThread; ++k) {
      const int col_off = block_n_start_idx + block_range_off + k;
      if (col_off < n_cols) {
        const float weight = __half2float(weight_ptr[col_off]);
        const float a = __half2float(a_ptr[a_row_off + col_off * a_col_stride]);
        const float a_hat = (a - mean) * rstd;
        float out = a_hat * weight;
        if (HAS_BIAS) out = out + __half2float(bias_ptr[col_off]);
        output_ptr[row_idx * output_row_stride + col_off * output_col_stride] = __float2half(out);
      }
    }
  }
}

template <int BLOCK_SIZE>
static void launch_rms_norm(half* out, const half* a, const half* weight, float* mean, float* rstd,
                            int64_t output_row_stride, int64_t output_col_stride, int64_t a_row_stride,
                            int64_t a_col_stride, int M, int N, float eps, cudaStream_t stream) {
  constexpr int num_warps = kernl_num_warps(BLOCK_SIZE);
  // bias_ptr=bias if bias is not None else a_arg
  layer_norm_fwd_fused_single_pass<BLOCK_SIZE, false, true><<<M, num_warps * 32, 0, stream>>>(
      out, a, weight, a, mean, rstd, output_row_stride, output_col_stride, a_row_stride, a_col_stride, N, eps);
}

// x: [M, N] fp16 with strides (a_row_stride, a_col_stride); out: [M, N] fp16 with its strides; weight: [N] fp16;
// mean, rstd: [M] fp32 (for the backward). Device pointers.
void kernl_rms_norm(half* out, const half* x, const half* weight, float* mean, float* rstd, int64_t output_row_stride,
                    int64_t output_col_stride, int64_t a_row_stride, int64_t a_col_stride, int M, int N, float eps,
                    cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  // catch eps being too small if the tensors are fp16
  eps = std::max(eps, 1.6e-5f);
  // Less than 64KB per feature: enqueue fused kernel
  const int MAX_FUSED_SIZE = 65536 / (int)sizeof(half);
  int next_pow2 = 1;
  while (next_pow2 < N) next_pow2 *= 2;
  int BLOCK_SIZE = std::min(MAX_FUSED_SIZE, next_pow2);
  BLOCK_SIZE = std::max(BLOCK_SIZE, 128);
  BLOCK_SIZE = std::min(BLOCK_SIZE, 4096);
  switch (BLOCK_SIZE) {
    case 128: launch_rms_norm<128>(out, x, weight, mean, rstd, output_row_stride, output_col_stride, a_row_stride, a_col_stride, M, N, eps, stream); break;
    case 256: launch_rms_norm<256>(out, x, weight, mean, rstd, output_row_stride, output_col_stride, a_row_stride, a_col_stride, M, N, eps, stream); break;
    case 512: launch_rms_norm<512>(out, x, weight, mean, rstd, output_row_stride, output_col_stride, a_row_stride, a_col_stride, M, N, eps, stream); break;
    case 1024: launch_rms_norm<1024>(out, x, weight, mean, rstd, output_row_stride, output_col_stride, a_row_stride, a_col_stride, M, N, eps, stream); break;
    case 2048: launch_rms_norm<2048>(out, x, weight, mean, rstd, output_row_stride, output_col_stride, a_row_stride, a_col_stride, M, N, eps, stream); break;
    default: launch_rms_norm<4096>(out, x, weight, mean, rstd, output_row_stride, output_col_stride, a_row_stride, a_col_stride, M, N, eps, stream); break;
  }
}
