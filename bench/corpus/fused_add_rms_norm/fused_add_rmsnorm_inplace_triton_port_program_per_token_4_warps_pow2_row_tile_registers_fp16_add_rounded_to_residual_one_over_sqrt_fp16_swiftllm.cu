// Fused residual add + RMSNorm as swiftLLM writes it (interestingLSY/swiftLLM, swiftllm/worker/kernels/rmsnorm.py
// _fwd_fused_add_rmsnorm behind fused_add_rmsnorm_inplace; a small vLLM-style LLaMA serving engine written in
// Python with Triton kernels) ported from Triton to CUDA C++. fp16 activations and weight, IN PLACE on both:
//   r = x + r   (fp16 + fp16, rounded to fp16, stored back into residual_io)
//   x = fp16( float(r) * (1 / sqrt(mean(float(r)^2) + eps)) * float(w) )   (stored back into input_and_output)
// so the statistics come from the ROUNDED sum, rstd is a division by sqrt (no rsqrt), fp32 math, one rounding at
// the store. Argument order (input_and_output, residual_io, weight, eps, hidden_size); one Triton program per token
// (grid num_tokens) with Triton's default 4 warps (128 threads); the whole row is one register tile, reduced with
// tl.sum (here: xor butterfly inside each warp, 4 warp sums through shared memory, read by every thread).
// The Triton row tile in CUDA terms: template <int BLOCK> (the tile width), element i * 128 + tid of the tile in
// thread tid's register i (coalesced scalar halves), masked past hidden_size.
// Fixed: the Triton kernel spans the row with tl.arange(0, hidden_size), which only compiles for a power-of-two
// hidden_size, so a 5120-wide (LLaMA-2-13B) or 3584-wide row could not be normalized; the tile is now the next
// power of two with masked loads and stores (the launcher's ladder over BLOCK = 256 .. 16384, like
// triton.next_power_of_2), and the token offset, a 32-bit program_id product in Triton, is 64-bit.
// Changed: Triton -> CUDA as above, the Python wrapper as a C++ launcher with device pointers and a stream.
// Sizes (one instantiation, BLOCK 4096): 8192 x 4096, decode 4 x 4096, tail 999 x 3001; eps 1e-6.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace swiftllm {

constexpr int kNumWarps = 4;  // Triton's default num_warps

/* kerntune:
args  = ["input_and_output: inout f16[num_tokens * hidden]", "residual_io: inout f16[num_tokens * hidden]",
         "weight: in f16[hidden]", "eps: f32 = 1e-6", "hidden_size: i32 = hidden"]
sizes = [{ num_tokens = 8192, hidden = 4096 }, { num_tokens = 4, hidden = 4096 }, { num_tokens = 999, hidden = 3001 }]
grid  = "num_tokens"
block = 128
template_args = ["4096"]
*/
template <int BLOCK>
__global__ void _fwd_fused_add_rmsnorm(half* __restrict__ input_and_output,  // [num_tokens, hidden_size]
                                       half* __restrict__ residual_io,       // [num_tokens, hidden_size]
                                       const half* __restrict__ weight,      // [hidden_size]
                                       const float eps, const int hidden_size) {
  constexpr int kThreads = kNumWarps * 32;
  constexpr int kPerThread = BLOCK / kThreads;
  static_assert(BLOCK % kThreads == 0, "the tile is whole warps");

  // grid shape: [num_tokens]
  const int64_t my_token_id = blockIdx.x;
  input_and_output += my_token_id * hidden_size;
  residual_io += my_token_id * hidden_size;

  // x = load(x); r = load(r); x += r; store(r, x)
  float x[kPerThread];
  float sum_sq = 0.f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int offs = i * kThreads + threadIdx.x;
    if (offs < hidden_size) {
      const half s = __hadd(input_and_output[offs], residual_io[offs]);
      residual_io[offs] = s;
      x[i] = __half2float(s);
    } else {
      x[i] = 0.f;
    }
    sum_sq += x[i] * x[i];
  }

  // variance = tl.sum(x * x, axis=0) / hidden_size
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  }
  __shared__ float warp_sums[kNumWarps];
  if (threadIdx.x % 32 == 0) {
    warp_sums[threadIdx.x / 32] = sum_sq;
  }
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kNumWarps; ++w) {
    total += warp_sums[w];
  }
  const float variance = total / hidden_size;
  const float rstd = 1.0f / sqrtf(variance + eps);

  // x = x * rstd * w, stored as fp16 over the input
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int offs = i * kThreads + threadIdx.x;
    if (offs < hidden_size) {
      const float w = __half2float(weight[offs]);
      input_and_output[offs] = __float2half(x[i] * rstd * w);
    }
  }
}

// r = x + r, x = rms_norm(x + r, w), both in place. Returns false for rows wider than the largest tile.
bool fused_add_rmsnorm_inplace(half* input_and_output, half* residual_io, const half* weight, float eps,
                               int num_tokens, int hidden_size, cudaStream_t stream) {
  const dim3 grid(num_tokens);
  const dim3 block(kNumWarps * 32);
  int tile = 256;
  while (tile < hidden_size) tile <<= 1;  // triton.next_power_of_2, at least two halves per thread
  switch (tile) {
    case 256:
      _fwd_fused_add_rmsnorm<256><<<grid, block, 0, stream>>>(input_and_output, residual_io, weight, eps, hidden_size);
      break;
    case 512:
      _fwd_fused_add_rmsnorm<512><<<grid, block, 0, stream>>>(input_and_output, residual_io, weight, eps, hidden_size);
      break;
    case 1024:
      _fwd_fused_add_rmsnorm<1024><<<grid, block, 0, stream>>>(input_and_output, residual_io, weight, eps,
                                                               hidden_size);
      break;
    case 2048:
      _fwd_fused_add_rmsnorm<2048><<<grid, block, 0, stream>>>(input_and_output, residual_io, weight, eps,
                                                               hidden_size);
      break;
    case 4096:
      _fwd_fused_add_rmsnorm<4096><<<grid, block, 0, stream>>>(input_and_output, residual_io, weight, eps,
                                                               hidden_size);
      break;
    case 8192:
      _fwd_fused_add_rmsnorm<8192><<<grid, block, 0, stream>>>(input_and_output, residual_io, weight, eps,
                                                               hidden_size);
      break;
    case 16384:
      _fwd_fused_add_rmsnorm<16384><<<grid, block, 0, stream>>>(input_and_output, residual_io, weight, eps,
                                                                hidden_size);
      break;
    default:
      return false;
  }
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace swiftllm
