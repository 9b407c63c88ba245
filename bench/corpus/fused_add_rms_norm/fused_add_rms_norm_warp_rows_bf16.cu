// Fused residual add + RMSNorm (bf16), one warp per token and 8 tokens per block (block (32, 8), the row from
// blockIdx.x * blockDim.y + threadIdx.y), extern "C", residual first and eps last in the argument list. Both
// buffers are updated in place: residual <- bf16(hidden + residual), hidden <- bf16(residual * rstd * w), the
// second pass re-reading the rounded residual from global memory.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

/* kerntune:
args  = ["residual: inout bf16[num_tokens * hidden_size]", "hidden_states: inout bf16[num_tokens * hidden_size]",
         "weight: in bf16[hidden_size]", "num_tokens: i32 = num_tokens", "hidden_size: i32 = hidden_size",
         "eps: f32 = 1e-6"]
sizes = [{ num_tokens = 4096, hidden_size = 8192 }, { num_tokens = 64, hidden_size = 7168 },
         { num_tokens = 1003, hidden_size = 5121 }]
grid  = "cdiv(num_tokens, 8)"
block = [32, 8]
*/
extern "C" __global__ void fused_add_rmsnorm_warp_bf16(__nv_bfloat16* residual, __nv_bfloat16* hidden_states,
                                                       const __nv_bfloat16* weight, int num_tokens, int hidden_size,
                                                       float eps) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= num_tokens) return;
  const size_t base = (size_t)row * hidden_size;
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden_size; i += 32) {
    const __nv_bfloat16 s =
        __float2bfloat16(__bfloat162float(hidden_states[base + i]) + __bfloat162float(residual[base + i]));
    residual[base + i] = s;
    const float f = __bfloat162float(s);
    ss += f * f;
  }
  for (int mask = 16; mask >= 1; mask /= 2) ss += __shfl_xor_sync(0xffffffff, ss, mask);
  const float inv = rsqrtf(ss / (float)hidden_size + eps);
  for (int i = threadIdx.x; i < hidden_size; i += 32) {
    hidden_states[base + i] = __float2bfloat16(__bfloat162float(residual[base + i]) * inv * __bfloat162float(weight[i]));
  }
}

extern "C" void fused_add_rmsnorm_bf16(__nv_bfloat16* residual, __nv_bfloat16* hidden_states,
                                       const __nv_bfloat16* weight, int num_tokens, int hidden_size, float eps,
                                       cudaStream_t stream) {
  dim3 block(32, 8);
  dim3 grid((num_tokens + 7) / 8);
  fused_add_rmsnorm_warp_bf16<<<grid, block, 0, stream>>>(residual, hidden_states, weight, num_tokens, hidden_size,
                                                          eps);
}
