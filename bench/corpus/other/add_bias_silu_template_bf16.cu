// Bias add then SiLU over a [tokens, d] activation (an MLP epilogue kept apart from its GEMM), templated over the
// element type and instantiated for bf16 by the launcher: a grid-stride loop over the flat index with the grid
// capped at 4096 blocks of 256, the bias column by i % d.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

namespace epilogue {

template <typename T>
__device__ __forceinline__ float to_float(T v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

/* kerntune:
args  = ["out: out bf16[tokens * d]", "x: in bf16[tokens * d]", "bias: in bf16[d]", "n: i64 = tokens * d",
         "d: i32 = d"]
sizes = [{ tokens = 8192, d = 8192 }, { tokens = 16, d = 14336 }, { tokens = 999, d = 4099 }]
grid  = "min(cdiv(tokens * d, 256), 4096)"
block = "256"
*/
template <typename T>
__global__ void add_bias_silu_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ bias,
                                     int64_t n, int d) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {
    const float v = to_float(x[i]) + to_float(bias[i % d]);
    out[i] = static_cast<T>(v / (1.0f + expf(-v)));
  }
}

}  // namespace epilogue

void add_bias_silu_bf16(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* bias, int64_t n, int d,
                        cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  epilogue::add_bias_silu_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(out, x, bias, n, d);
}
