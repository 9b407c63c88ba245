// GELU(tanh)-and-mul (bf16) written the way a PyTorch-module port does it (Gemma's gelu_pytorch_tanh(gate) * up):
// a 2-D grid, blockIdx.y = token and blockIdx.x a 256-wide slice of the row, one element per thread, extern "C"
// entry. Each tensor op of the Python original rounds to bf16: the activation result is rounded before the
// multiply, and the product rounded again.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

/* kerntune:
args  = ["gate_up: in bf16[num_tokens * 2 * intermediate]", "out: out bf16[num_tokens * intermediate]",
         "num_tokens: i32 = num_tokens", "intermediate: i32 = intermediate"]
sizes = [{ num_tokens = 2048, intermediate = 16384 }, { num_tokens = 16, intermediate = 9216 },
         { num_tokens = 333, intermediate = 12291 }]
grid  = ["cdiv(intermediate, 256)", "num_tokens"]
block = "256"
*/
extern "C" __global__ void gelu_tanh_and_mul_bf16(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int num_tokens,
                                                  int intermediate) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int token = blockIdx.y;
  if (col >= intermediate || token >= num_tokens) return;
  const size_t in_row = (size_t)token * 2 * intermediate;
  const float g = __bfloat162float(gate_up[in_row + col]);
  const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  const __nv_bfloat16 act = __float2bfloat16(0.5f * g * (1.0f + tanhf(inner)));
  const __nv_bfloat16 up = gate_up[in_row + intermediate + col];
  out[(size_t)token * intermediate + col] = __float2bfloat16(__bfloat162float(act) * __bfloat162float(up));
}

extern "C" void launch_gelu_tanh_and_mul_bf16(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int num_tokens,
                                              int intermediate, cudaStream_t stream) {
  dim3 block(256);
  dim3 grid((intermediate + 255) / 256, num_tokens);
  gelu_tanh_and_mul_bf16<<<grid, block, 0, stream>>>(gate_up, out, num_tokens, intermediate);
}
