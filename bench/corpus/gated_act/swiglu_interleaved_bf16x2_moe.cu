// SwiGLU (bf16) of a mixture-of-experts expert whose fused gate/up (w13) projection was interleaved when the
// weights were loaded, so the GEMM writes one routed row as [gate_0, up_0, gate_1, up_1, ...]: gate at the even
// column 2j, up at the odd column 2j + 1, out[t, j] = silu(gate) * up with the out row d wide. Each (gate, up)
// pair is read as one __nv_bfloat162 (the bf16 row reinterpreted as d pairs: a row of 2 * d bf16 is always
// 4-byte aligned, whatever d is), the math is fp32 and the result is rounded to bf16 once, at the store.
// One routed row (token) per block, a fixed block of kThreads = 256 threads striding over j.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace moe {

constexpr int kThreads = 256;

__device__ __forceinline__ float silu(const float x) { return x / (1.0f + expf(-x)); }

/* kerntune:
args  = ["out: out bf16[tokens * d]", "gate_up: in bf16[tokens * 2 * d]", "d: i32 = d"]
sizes = [{ tokens = 16384, d = 2048 }, { tokens = 8, d = 768 }, { tokens = 1001, d = 1407 }]
grid  = "tokens"
block = 256
*/
__global__ void swiglu_interleaved_kernel(__nv_bfloat16* __restrict__ out,            // [tokens, d]
                                          const __nv_bfloat16* __restrict__ gate_up,  // [tokens, d, 2]
                                          const int d) {
  const int64_t token = blockIdx.x;
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(gate_up) + token * d;
  __nv_bfloat16* out_row = out + token * d;
  for (int j = threadIdx.x; j < d; j += kThreads) {
    const float2 gu = __bfloat1622float2(pairs[j]);  // .x = gate (column 2j), .y = up (column 2j + 1)
    out_row[j] = __float2bfloat16(silu(gu.x) * gu.y);
  }
}

}  // namespace moe

// out: [num_tokens, d]; gate_up: [num_tokens, 2 * d] with gate and up interleaved column by column.
// num_tokens counts the rows routed to the expert(s) (tokens * top_k after the permutation).
void swiglu_interleaved_bf16(__nv_bfloat16* out, const __nv_bfloat16* gate_up, int64_t num_tokens, int d,
                             cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return;
  const dim3 grid(static_cast<unsigned>(num_tokens));
  const dim3 block(moe::kThreads);
  moe::swiglu_interleaved_kernel<<<grid, block, 0, stream>>>(out, gate_up, d);
}
