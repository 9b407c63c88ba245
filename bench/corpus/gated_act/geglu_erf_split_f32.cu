// GEGLU with the exact (erf) GELU, fp32, in the style of llama.cpp's ggml-cuda unary.cu GLU kernels: gate and
// value come as two tensors (ggml's "split" GLU) with row strides o0 and o1, the kernel walks a flat index over
// all k = rows * n outputs with 64-bit indices, one element per thread, CUDA_GLU_BLOCK_SIZE threads per block.
#include <cuda_runtime.h>
#include <cstdint>

#define CUDA_GLU_BLOCK_SIZE 256

static __device__ __forceinline__ float op_gelu_erf(float x) {
  const float SQRT_2_INV = 0.70710678118654752440084436210484f;
  return 0.5f * x * (1.0f + erff(x * SQRT_2_INV));
}

/* kerntune:
args  = ["x: in f32[rows * n]", "g: in f32[rows * n]", "dst: out f32[rows * n]", "k: i64 = rows * n",
         "n: i64 = n", "o0: i64 = n", "o1: i64 = n"]
sizes = [{ rows = 2048, n = 14336 }, { rows = 16, n = 14336 }, { rows = 1000, n = 4099 }]
grid  = "cdiv(rows * n, 256)"
block = "256"
*/
static __global__ void geglu_erf_f32(const float * x, const float * g, float * dst, const int64_t k,
                                     const int64_t n, const int64_t o0, const int64_t o1) {
  const int64_t i = int64_t(blockDim.x) * blockIdx.x + threadIdx.x;
  if (i >= k) {
    return;
  }
  // perform base op on first half, multiply by second half
  const int64_t j0 = (i / n) * o0 + (i % n);
  const int64_t j1 = o0 == o1 ? j0 : (i / n) * o1 + (i % n);
  dst[i] = op_gelu_erf(x[j0]) * g[j1];
}

static void geglu_erf_f32_cuda(const float * x, const float * g, float * dst, const int64_t k, const int64_t n,
                               const int64_t o0, const int64_t o1, cudaStream_t stream) {
  const int64_t num_blocks = (k + CUDA_GLU_BLOCK_SIZE - 1) / CUDA_GLU_BLOCK_SIZE;
  geglu_erf_f32<<<num_blocks, CUDA_GLU_BLOCK_SIZE, 0, stream>>>(x, g, dst, k, n, o0, o1);
}

// x, g: [nrows, nc] contiguous (two separate tensors), dst: [nrows, nc]
void ggml_cuda_op_geglu_erf_split(const float * x, const float * g, float * dst, int64_t nrows, int64_t nc,
                                  cudaStream_t stream) {
  geglu_erf_f32_cuda(x, g, dst, nrows * nc, nc, nc, nc, stream);
}
