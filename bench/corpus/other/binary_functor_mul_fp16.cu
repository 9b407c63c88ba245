// Elementwise multiply (fp16) through a generic binary kernel: the operation is a functor type (a stateless struct
// with a __device__ operator() on the fp32 "opmath" values), the kernel is templated over the element type and the
// functor, and a templated host launcher is instantiated by the public entry point (mul_f16), PyTorch / TensorRT
// "elementwise with a functor" style. One element per thread, a 64-bit flat index, 256 threads per block.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace ops {

struct AddFunctor {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

struct MulFunctor {
  __device__ __forceinline__ float operator()(float a, float b) const { return a * b; }
};

}  // namespace ops

/* kerntune:
args  = ["out: out f16[tokens * d]", "a: in f16[tokens * d]", "b: in f16[tokens * d]", "n: i64 = tokens * d"]
sizes = [{ tokens = 8192, d = 8192 }, { tokens = 16, d = 14336 }, { tokens = 1001, d = 4097 }]
grid  = "cdiv(tokens * d, 256)"
block = "256"
*/
template <typename scalar_t, typename func_t>
__global__ void binary_elementwise_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ a,
                                          const scalar_t* __restrict__ b, int64_t n) {
  const func_t f{};
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = static_cast<scalar_t>(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
  }
}

template <typename scalar_t, typename func_t>
void launch_binary_elementwise(scalar_t* out, const scalar_t* a, const scalar_t* b, int64_t n, cudaStream_t stream) {
  constexpr int kBlockSize = 256;
  const int64_t grid = (n + kBlockSize - 1) / kBlockSize;
  binary_elementwise_kernel<scalar_t, func_t><<<grid, kBlockSize, 0, stream>>>(out, a, b, n);
}

void mul_f16(__half* out, const __half* a, const __half* b, int64_t n, cudaStream_t stream) {
  launch_binary_elementwise<__half, ops::MulFunctor>(out, a, b, n, stream);
}
