// LayerNorm forward as attorch writes it (BobMcDear/attorch, attorch/layer_norm_kernels.py layer_norm_forward_kernel
// launched by LayerNormAutoGrad.forward in attorch/layer_norm_layer.py; attorch re-implements torch.nn layers as
// Triton kernels), written as the CUDA port of that Triton program, for the mixed-precision training contract:
//   input [batch_dim, feat_dim] fp16 (an autocast activation) addressed through (input_batch_stride,
//   input_feat_stride), weight and bias fp32 [feat_dim] (the module's parameters), output fp32 (attorch's LayerNorm
//   autocasts its output to fp32 by default, autocast_to_fp32 = True) through its own two strides, and the
//   per-row statistics mean and inv_std fp32 [batch_dim] written when save_stats (the input requires grad).
//   The program: BLOCK_SIZE_FEAT = next_power_of_2(feat_dim) columns of the row loaded at once (masked, zero
//   filled), converted to fp32 and kept in registers; mean = sum(x) / feat_dim; diff = where(mask, x - mean, 0);
//   inv_std = 1 / sqrt(sum(diff * diff) / feat_dim + eps) (two passes over the registers, exact variance);
//   output = diff * inv_std, then * weight if scale_by_weight, then + bias if add_bias; no rounding (fp32 out).
//   scale_by_weight, add_bias, save_stats and BLOCK_SIZE_FEAT are tl.constexpr, so they are template arguments and
//   the host instantiates the kernel for the flags and the power of two it needs. Each tl.sum over the row is a
//   xor butterfly in each warp plus the warp sums through shared memory; the row is spread over the threads as
//   column = i * threads + thread (the feature stride is a runtime argument, no vector loads).
//   Launch: grid cdiv(batch_dim, BLOCK_SIZE_BATCH) programs; BLOCK_SIZE_BATCH_heuristic gives 1 for feat_dim >= 64,
//   so one row per program; num_warps is autotuned by attorch over 1 .. 32 warps (warps_kernel_configs), fixed here
//   at 4 warps (128 threads).
// Changed: attorch's multi-row programs for feat_dim < 64 (BLOCK_SIZE_BATCH > 1) are not ported (the launcher takes
// feat_dim >= 64); the autograd Function's tensor plumbing became a launcher with device pointers, the flags and a
// stream. Fixed: Triton computes batch_offset * input_batch_stride (and the output's) in int32, which wraps for
// tensors past 2^31 elements; the row and column offsets are 64-bit here.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cassert>
#include <cstdint>

constexpr int kNumWarps = 4;
constexpr int kThreads = kNumWarps * 32;

// tl.sum(v, axis=1) for the one row of the program; every thread gets the sum
__device__ __forceinline__ float row_sum(float v, float* warp_sums) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNumWarps; ++w) total += warp_sums[w];
  __syncthreads();  // warp_sums is reused by the next sum
  return total;
}

/* kerntune:
args  = ["input_pointer: in f16[batch * feat]", "weight_pointer: in f32[feat]", "bias_pointer: in f32[feat]",
         "mean_pointer: out f32[batch]", "inv_std_pointer: out f32[batch]", "output_pointer: out f32[batch * feat]",
         "batch_dim: i32 = batch", "feat_dim: i32 = feat", "input_batch_stride: i32 = feat",
         "input_feat_stride: i32 = 1", "output_batch_stride: i32 = feat", "output_feat_stride: i32 = 1",
         "eps: f32 = 1e-5"]
sizes = [{ batch = 8192, feat = 4096 }, { batch = 4, feat = 4096 }, { batch = 999, feat = 3001 }]
grid  = "batch"
block = 128
template_args = ["4096", "true", "true", "true"]
*/
template <int BLOCK_SIZE_FEAT, bool scale_by_weight, bool add_bias, bool save_stats>
__global__ void layer_norm_forward_kernel(const __half* input_pointer, const float* weight_pointer,
                                          const float* bias_pointer, float* mean_pointer, float* inv_std_pointer,
                                          float* output_pointer, int batch_dim, int feat_dim,
                                          int input_batch_stride, int input_feat_stride, int output_batch_stride,
                                          int output_feat_stride, float eps) {
  constexpr int kPerThread = BLOCK_SIZE_FEAT < kThreads ? 1 : BLOCK_SIZE_FEAT / kThreads;
  __shared__ float warp_sums[kNumWarps];

  // This program processes BLOCK_SIZE_BATCH = 1 row and BLOCK_SIZE_FEAT columns.
  const int batch_pid = blockIdx.x;
  const int batch_offset = batch_pid;
  if (batch_offset >= batch_dim) return;  // batch_mask (the same for the whole program)

  const __half* input_row = input_pointer + static_cast<int64_t>(input_batch_stride) * batch_offset;
  float* output_row = output_pointer + static_cast<int64_t>(output_batch_stride) * batch_offset;

  float input[kPerThread];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int feat_offset = i * kThreads + threadIdx.x;
    const bool feat_mask = feat_offset < feat_dim && feat_offset < BLOCK_SIZE_FEAT;
    input[i] = feat_mask ? __half2float(input_row[static_cast<int64_t>(input_feat_stride) * feat_offset]) : 0.0f;
    sum += input[i];
  }
  const float mean = row_sum(sum, warp_sums) / feat_dim;

  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int feat_offset = i * kThreads + threadIdx.x;
    input[i] = feat_offset < feat_dim ? input[i] - mean : 0.0f;  // diff
    sum_sq += input[i] * input[i];
  }
  const float inv_std = 1.0f / sqrtf(row_sum(sum_sq, warp_sums) / feat_dim + eps);

  if (save_stats && threadIdx.x == 0) {
    mean_pointer[batch_offset] = mean;
    inv_std_pointer[batch_offset] = inv_std;
  }

#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int feat_offset = i * kThreads + threadIdx.x;
    if (feat_offset < feat_dim && feat_offset < BLOCK_SIZE_FEAT) {
      float output = input[i] * inv_std;
      if (scale_by_weight) {
        output *= weight_pointer[feat_offset];
        if (add_bias) output += bias_pointer[feat_offset];
      }
      output_row[static_cast<int64_t>(output_feat_stride) * feat_offset] = output;
    }
  }
}

// the kernel's arguments as LayerNormAutoGrad.forward passes them (flattened input, its strides, the output's)
struct LayerNormArgs {
  const __half* input;
  const float* weight;
  const float* bias;
  float* mean;
  float* inv_std;
  float* output;
  int batch_dim, feat_dim;
  int input_batch_stride, input_feat_stride, output_batch_stride, output_feat_stride;
  float eps;
  cudaStream_t stream;
};

template <int BLOCK_SIZE_FEAT, bool scale_by_weight, bool add_bias, bool save_stats>
static void launch_block(const LayerNormArgs& a) {
  const dim3 grid(a.batch_dim);  // cdiv(batch_dim, BLOCK_SIZE_BATCH) with BLOCK_SIZE_BATCH = 1
  layer_norm_forward_kernel<BLOCK_SIZE_FEAT, scale_by_weight, add_bias, save_stats><<<grid, kThreads, 0, a.stream>>>(
      a.input, a.weight, a.bias, a.mean, a.inv_std, a.output, a.batch_dim, a.feat_dim, a.input_batch_stride,
      a.input_feat_stride, a.output_batch_stride, a.output_feat_stride, a.eps);
}

template <bool scale_by_weight, bool add_bias, bool save_stats>
static void launch_flags(const LayerNormArgs& a) {
  int block_size_feat = 1;
  while (block_size_feat < a.feat_dim) block_size_feat <<= 1;  // triton.next_power_of_2(feat_dim)
  switch (block_size_feat) {
    case 64: launch_block<64, scale_by_weight, add_bias, save_stats>(a); break;
    case 128: launch_block<128, scale_by_weight, add_bias, save_stats>(a); break;
    case 256: launch_block<256, scale_by_weight, add_bias, save_stats>(a); break;
    case 512: launch_block<512, scale_by_weight, add_bias, save_stats>(a); break;
    case 1024: launch_block<1024, scale_by_weight, add_bias, save_stats>(a); break;
    case 2048: launch_block<2048, scale_by_weight, add_bias, save_stats>(a); break;
    case 4096: launch_block<4096, scale_by_weight, add_bias, save_stats>(a); break;
    case 8192: launch_block<8192, scale_by_weight, add_bias, save_stats>(a); break;
    case 16384: launch_block<16384, scale_by_weight, add_bias, save_stats>(a); break;
    default: assert(false && "layer_norm_forward: feat_dim over 16384 is not instantiated");
  }
}

// input: [batch_dim, feat_dim] fp16 at (input_batch_stride, input_feat_stride); weight, bias: [feat_dim] fp32
// (used when scale_by_weight; bias only when add_bias too); output: [batch_dim, feat_dim] fp32 at its strides;
// mean, inv_std: [batch_dim] fp32, written when save_stats. Device pointers; feat_dim >= 64.
void layer_norm_forward(const __half* input, const float* weight, const float* bias, float* mean, float* inv_std,
                        float* output, int batch_dim, int feat_dim, int input_batch_stride, int input_feat_stride,
                        int output_batch_stride, int output_feat_stride, float eps, bool scale_by_weight,
                        bool add_bias, bool save_stats, cudaStream_t stream) {
  if (batch_dim == 0 || feat_dim == 0) return;
  assert(feat_dim >= 64 && "attorch's multi-row programs for feat_dim < 64 are not ported");
  add_bias = scale_by_weight && add_bias;  // add_bias = scale_by_weight and bias is not None
  const LayerNormArgs a{input, weight, bias, mean, inv_std, output, batch_dim, feat_dim, input_batch_stride,
                        input_feat_stride, output_batch_stride, output_feat_stride, eps, stream};
  if (scale_by_weight && add_bias) {
    if (save_stats) launch_flags<true, true, true>(a);
    else launch_flags<true, true, false>(a);
  } else if (scale_by_weight) {
    if (save_stats) launch_flags<true, false, true>(a);
    else launch_flags<true, false, false>(a);
  } else {
    if (save_stats) launch_flags<false, false, true>(a);
    else launch_flags<false, false, false>(a);
  }
}
