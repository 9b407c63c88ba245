// Mul-and-SiLU (fp16): out = x * silu(y) with the activation on the second half (vLLM's mul_and_silu order).
// Rows per block with 2-D blocks: threadIdx.y picks one of kRowsPerBlock tokens, threadIdx.x strides along d;
// constexpr tile constants; the arithmetic stays in fp32 and is rounded once.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

constexpr int kThreadsX = 128;
constexpr int kRowsPerBlock = 4;

/* kerntune:
args  = ["out: out f16[num_tokens * d]", "input: in f16[num_tokens * 2 * d]", "num_tokens: i32 = num_tokens",
         "d: i32 = d"]
sizes = [{ num_tokens = 8192, d = 5632 }, { num_tokens = 48, d = 11008 }, { num_tokens = 1001, d = 6913 }]
grid  = "cdiv(num_tokens, 4)"
block = [128, 4]
*/
__global__ void mul_and_silu_kernel(__half* __restrict__ out, const __half* __restrict__ input, int num_tokens,
                                    int d) {
  const int token = blockIdx.x * kRowsPerBlock + threadIdx.y;
  if (token >= num_tokens) return;
  const __half* x = input + (long long)token * 2 * d;
  const __half* y = x + d;
  __half* o = out + (long long)token * d;
  for (int i = threadIdx.x; i < d; i += kThreadsX) {
    const float a = __half2float(x[i]);
    const float b = __half2float(y[i]);
    o[i] = __float2half(a * (b / (1.0f + __expf(-b))));
  }
}

void mul_and_silu(__half* out, const __half* input, int num_tokens, int d, cudaStream_t stream) {
  const dim3 block(kThreadsX, kRowsPerBlock);
  const dim3 grid((num_tokens + kRowsPerBlock - 1) / kRowsPerBlock);
  mul_and_silu_kernel<<<grid, block, 0, stream>>>(out, input, num_tokens, d);
}
