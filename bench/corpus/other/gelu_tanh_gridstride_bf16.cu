// Elementwise GELU (tanh approximation), bf16, not gated: a grid-stride loop over n elements with the block size a
// template parameter (instantiated with 512 by the launcher) and grid = min(ceil(n / 512), 65535).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

/* kerntune:
args  = ["in: in bf16[rows * cols]", "out: out bf16[rows * cols]", "n: i64 = rows * cols"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 16, cols = 14336 }, { rows = 1000, cols = 4099 }]
grid  = "min(cdiv(rows * cols, 512), 65535)"
block = "512"
*/
template <int BLOCK_SIZE>
__global__ void gelu_tanh_kernel(const __nv_bfloat16* __restrict__ in, __nv_bfloat16* __restrict__ out, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * BLOCK_SIZE + threadIdx.x; i < n; i += (int64_t)gridDim.x * BLOCK_SIZE) {
    const float x = __bfloat162float(in[i]);
    const float y = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    out[i] = __float2bfloat16(y);
  }
}

void gelu_tanh_bf16(const __nv_bfloat16* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>((n + 511) / 512, 65535);
  gelu_tanh_kernel<512><<<blocks, 512, 0, stream>>>(in, out, n);
}
