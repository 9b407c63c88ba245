// Merge of two partial attention states as JD xLLM writes it for beam search with a shared prompt
// (jd-opensource/xllm, xllm/core/kernels/.../xattention/lse_combine.cu, lse_combine_kernel<scalar_t, out_scalar_t>
// behind lse_combine: the attention over the prefix shared by all beams and the attention over each beam's own
// tokens, combined by their log-sum-exp), fp16:
//   shared_o, unshared_o, output [B, H, D] (B = batch * beams), shared_lse, unshared_lse [B, H] fp32 in the BASE-2
//   domain: M = max(a, b), lse = M + log2f(exp2f(a - M) + exp2f(b - M)), w_a = exp2f(a - lse), w_b = exp2f(b - lse),
//   out = out_t(w_a * o_a + w_b * o_b), fp32 math, one rounding at the store; argument order output, shared_o,
//   shared_lse, unshared_o, unshared_lse, B, H, D, all sizes int64
//   ONE BLOCK PER (b, h) ROW ON gridDim.y (grid (1, rows)), 128 threads striding along D; template over the input
//   and output types (two nested dtype dispatches in xLLM; spec = <half, half>); __restrict__ pointers; stream
// Fixed: the grid put all B * H rows on gridDim.y, which is limited to 65535 (the launch fails beyond: 2048 beams
// of 64 heads); the launcher now caps gridDim.y at 65535 and the block strides over rows by gridDim.y.
// The torch::Tensor wrapper and its shape checks are replaced by device pointers and sizes.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace {

// Each block handles one (batch_idx, head_idx) row of the flattened [B * H, D] layout at a time; threads run along
// head_dim for coalesced access.
/* kerntune:
args  = ["output: out f16[B * H * D]", "shared_o: in f16[B * H * D]", "shared_lse: in f32[B * H] ~ uniform(-4, 12)",
         "unshared_o: in f16[B * H * D]", "unshared_lse: in f32[B * H] ~ uniform(-4, 12)", "B: i64 = B",
         "H: i64 = H", "D: i64 = D"]
sizes = [{ B = 2048, H = 64, D = 128 }, { B = 8, H = 32, D = 128 }, { B = 37, H = 7, D = 96 }]
grid  = ["1", "min(B * H, 65535)"]
block = "128"
template_args = ["half", "half"]
*/
template <typename scalar_t, typename out_scalar_t>
__global__ void lse_combine_kernel(
    out_scalar_t* __restrict__ output,        // [B, H, D]
    const scalar_t* __restrict__ shared_o,    // [B, H, D]
    const float* __restrict__ shared_lse,     // [B, H, 1], fp32
    const scalar_t* __restrict__ unshared_o,  // [B, H, D]
    const float* __restrict__ unshared_lse,   // [B, H, 1], fp32
    const int64_t B,                          // batch_size * beam_size
    const int64_t H,                          // num_heads
    const int64_t D) {                        // head_dim
  const int64_t total_elements = B * H;

  for (int64_t idx = static_cast<int64_t>(blockIdx.y); idx < total_elements; idx += gridDim.y) {
    // the two log-sum-exps of this (batch, head) row, base 2
    const float lse_a = shared_lse[idx];
    const float lse_b = unshared_lse[idx];

    const float lse_max = fmaxf(lse_a, lse_b);
    const float exp_a = exp2f(lse_a - lse_max);
    const float exp_b = exp2f(lse_b - lse_max);
    const float lse_new = lse_max + log2f(exp_a + exp_b);

    // normalized weights of the two partial outputs
    const float w_a = exp2f(lse_a - lse_new);
    const float w_b = exp2f(lse_b - lse_new);

    const int64_t base_idx = idx * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const float a = static_cast<float>(shared_o[base_idx + d]);
      const float b = static_cast<float>(unshared_o[base_idx + d]);
      output[base_idx + d] = static_cast<out_scalar_t>(w_a * a + w_b * b);
    }
  }
}

}  // namespace

namespace xllm::kernel::cuda {

constexpr int64_t kMaxGridDimY = 65535;

// shared_o, unshared_o, output: [B, H, D]; shared_lse, unshared_lse: [B, H] fp32 (base 2). Device pointers.
template <typename in_t, typename out_t>
void lse_combine(out_t* output, const in_t* shared_o, const float* shared_lse, const in_t* unshared_o,
                 const float* unshared_lse, int64_t B, int64_t H, int64_t D, cudaStream_t stream) {
  const int64_t total_elements = B * H;
  const int threads_per_block = 128;
  dim3 block_dim(threads_per_block, 1, 1);
  dim3 grid_dim(1, static_cast<unsigned int>(std::min(total_elements, kMaxGridDimY)), 1);
  lse_combine_kernel<in_t, out_t><<<grid_dim, block_dim, 0, stream>>>(output, shared_o, shared_lse, unshared_o,
                                                                     unshared_lse, B, H, D);
}

template void lse_combine<half, half>(half*, const half*, const float*, const half*, const float*, int64_t, int64_t,
                                      int64_t, cudaStream_t);
template void lse_combine<float, float>(float*, const float*, const float*, const float*, const float*, int64_t,
                                        int64_t, int64_t, cudaStream_t);

}  // namespace xllm::kernel::cuda
