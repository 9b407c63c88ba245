// Fused residual add + RMSNorm as nano-vllm writes it (GeeeekExplorer/nano-vllm, nanovllm/layers/layernorm.py
// RMSNorm.add_rms_forward, a @torch.compile'd PyTorch method), ported to CUDA C++ in the shape TorchInductor gives
// such a row reduction (a persistent reduction: one row per program, the whole row in registers, RBLOCK = the next
// power of two of hidden_size, 8 warps). bf16, OUT OF PLACE with two outputs: s = float(x) + float(residual) in
// fp32 (NOT rounded), residual_out = bf16(s), var = mean(s * s) over the unrounded fp32 sums, out =
// bf16(bf16(s * rsqrt(var + eps)) * weight) (x.to(orig_dtype).mul_(weight): rounded after the scale, then the bf16
// product rounded again; the weight is bf16 since nano-vllm sets the default dtype to the model's). One block of
// 256 threads per token, template <int RBLOCK>, RBLOCK / 256 values per thread at columns i * 256 + threadIdx.x
// (masked past hidden_size), sum of squares by an xor-butterfly warp reduce and 8 warp partials in __shared__ that
// every thread re-reads. Argument order (x, residual, weight, out, residual_out, eps, num_tokens, hidden_size).
// Changed: the Python module (compiled by Inductor to a Triton kernel) written as plain CUDA with a host launcher
// taking device pointers and a stream; RBLOCK instantiated for 1024 / 2048 / 4096 / 8192 by the launcher; token
// offsets in 64 bits. No bug found. Sizes: 16384 x 4096, decode 4 x 3584 (Qwen2-7B), 999 x 4001 (odd width: the
// masked tail of the register row).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace nanovllm {

constexpr int kNumWarps = 8;
constexpr int kThreads = kNumWarps * 32;

/* kerntune:
args  = ["x: in bf16[num_tokens * hidden_size]", "residual: in bf16[num_tokens * hidden_size]",
         "weight: in bf16[hidden_size]", "out: out bf16[num_tokens * hidden_size]",
         "residual_out: out bf16[num_tokens * hidden_size]", "eps: f32 = 1e-6", "num_tokens: i32 = num_tokens",
         "hidden_size: i32 = hidden_size"]
sizes = [{ num_tokens = 16384, hidden_size = 4096 }, { num_tokens = 4, hidden_size = 3584 },
         { num_tokens = 999, hidden_size = 4001 }]
grid  = "num_tokens"
block = 256
template_args = ["4096"]
*/
template <int RBLOCK>
__global__ void __launch_bounds__(kThreads) add_rms_forward_kernel(
    const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ residual,
    const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* __restrict__ out, __nv_bfloat16* __restrict__ residual_out,
    const float eps, const int num_tokens, const int hidden_size) {
  constexpr int kPerThread = RBLOCK / kThreads;
  __shared__ float warp_partials[kNumWarps];

  const int row = blockIdx.x;
  if (row >= num_tokens) {
    return;  // the same for the whole block
  }
  const int64_t row_offset = (int64_t)row * hidden_size;

  // x = x.float().add_(residual.float()); residual = x.to(orig_dtype)
  float s[kPerThread];
  float sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerThread; i++) {
    const int col = i * kThreads + threadIdx.x;
    const bool mask = col < hidden_size;
    const float a = mask ? __bfloat162float(x[row_offset + col]) : 0.0f;
    const float b = mask ? __bfloat162float(residual[row_offset + col]) : 0.0f;
    s[i] = a + b;
    sq += s[i] * s[i];
    if (mask) {
      residual_out[row_offset + col] = __float2bfloat16(s[i]);
    }
  }

  // var = x.pow(2).mean(dim=-1)
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    sq += __shfl_xor_sync(0xffffffff, sq, offset);
  }
  if ((threadIdx.x & 31) == 0) {
    warp_partials[threadIdx.x >> 5] = sq;
  }
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kNumWarps; w++) {
    total += warp_partials[w];
  }
  const float rstd = rsqrtf(total / hidden_size + eps);

  // x.mul_(rsqrt(var + eps)); x = x.to(orig_dtype).mul_(weight)
#pragma unroll
  for (int i = 0; i < kPerThread; i++) {
    const int col = i * kThreads + threadIdx.x;
    if (col < hidden_size) {
      const __nv_bfloat16 normed = __float2bfloat16(s[i] * rstd);
      out[row_offset + col] = __float2bfloat16(__bfloat162float(normed) * __bfloat162float(weight[col]));
    }
  }
}

}  // namespace nanovllm

// out, residual_out = RMSNorm.add_rms_forward(x, residual), all [num_tokens, hidden_size] bf16.
// Returns -1 for rows wider than 8192.
int add_rms_forward(const __nv_bfloat16* x, const __nv_bfloat16* residual, const __nv_bfloat16* weight,
                    __nv_bfloat16* out, __nv_bfloat16* residual_out, float eps, int num_tokens, int hidden_size,
                    cudaStream_t stream) {
  dim3 grid(num_tokens);
  dim3 block(nanovllm::kThreads);
  if (hidden_size <= 1024) {
    nanovllm::add_rms_forward_kernel<1024><<<grid, block, 0, stream>>>(x, residual, weight, out, residual_out, eps,
                                                                        num_tokens, hidden_size);
  } else if (hidden_size <= 2048) {
    nanovllm::add_rms_forward_kernel<2048><<<grid, block, 0, stream>>>(x, residual, weight, out, residual_out, eps,
                                                                        num_tokens, hidden_size);
  } else if (hidden_size <= 4096) {
    nanovllm::add_rms_forward_kernel<4096><<<grid, block, 0, stream>>>(x, residual, weight, out, residual_out, eps,
                                                                        num_tokens, hidden_size);
  } else if (hidden_size <= 8192) {
    nanovllm::add_rms_forward_kernel<8192><<<grid, block, 0, stream>>>(x, residual, weight, out, residual_out, eps,
                                                                        num_tokens, hidden_size);
  } else {
    return -1;
  }
  return 0;
}
