// GEGLU as NVIDIA NeMo writes it for Stable Diffusion (NVIDIA/NeMo, nemo/collections/multimodal/modules/
// stable_diffusion/fast_geglu/geglu_cuda.cu geglu_kernel behind geglu_cuda, loaded as the
// "nemo_stable_diffusion_fast_geglu_ext" torch extension for the UNet's feed-forward GEGLU), fp16.
// Layout: x_and_gate [n, 2, dim_last] (the projection output of n tokens): the VALUE half x first, the GATE half
// second; out [n, dim_last] = x * gelu(gate) with the exact erf GELU (PyTorch's formula), opmath float, one
// rounding to half at the store. Output first in the argument list (out, x_and_gate), no sizes passed to the kernel:
// dim_last is a template parameter from a host dispatch over the SD / SDXL inner widths 1280, 2560, 5120.
// Launch: BLOCK_DIM_X = 160 threads (__launch_bounds__), VEC_ELEMS = 8 halves per 16-byte aligned struct, each
// block handling FOR_LOOP consecutive 1280-column chunks (160 x 8) of the flattened rows, all loads first, then the
// math, then the stores; the host picks FOR_LOOP = 2, halved while n * dim_last is not a multiple of 160 * 8 *
// FOR_LOOP, grid n * dim_last / (1280 * FOR_LOOP); there is no tail path (the widths are multiples of 1280).
// No bug found. Changed: CUDA_CHECK(cudaPeekAtLastError()) became cudaGetLastError() and the macro prints the error
// code without cudaGetErrorString (what the launch harness provides), the backward kernel and the Python binding are left out; the intptr_t launcher is kept.
// Sizes (dim_last 5120, the SDXL 1280-channel blocks, so one instantiation <half, float, 160, 5120, 8, 2>):
// 4096 tokens (4 images x 1024 latent tokens), decode-sized 4 tokens, tail 999 tokens.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess) {                                                           \
      fprintf(stderr, "CUDA error at %s:%d code=%d \"%s\" \n", __FILE__, __LINE__,       \
              (int)err_, #call);                                                         \
      exit(EXIT_FAILURE);                                                                \
    }                                                                                    \
  } while (0)

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;  // M_SQRT1_2

// erf GELU in the math type (as ATen's GeluCUDAKernelImpl computes it)
template <typename opmath_t>
__device__ __inline__ opmath_t gelu(opmath_t x) {
  constexpr opmath_t kAlpha = static_cast<opmath_t>(kInvSqrt2);
  return x * opmath_t(0.5) * (opmath_t(1) + ::erf(x * kAlpha));
}

}  // namespace

/* kerntune:
args  = ["out: out f16[n * 5120]", "x_and_gate: in f16[n * 2 * 5120]"]
sizes = [{ n = 4096 }, { n = 4 }, { n = 999 }]
grid  = "n * 2"
block = 160
template_args = ["half", "float", "160", "5120", "8", "2"]
*/
template <typename scalar_t, typename opmath_t, int BLOCK_DIM_X, int DIM_LAST, int VEC_ELEMS, int FOR_LOOP>
__global__ __launch_bounds__(BLOCK_DIM_X) void geglu_kernel(scalar_t* out, scalar_t const* x_and_gate) {
  static_assert(DIM_LAST % (BLOCK_DIM_X * VEC_ELEMS) == 0, "a row must be whole IO chunks");
  constexpr int CHUNKS_PER_ROW = DIM_LAST / (BLOCK_DIM_X * VEC_ELEMS);
  struct alignas(sizeof(scalar_t) * VEC_ELEMS) Vec {
    scalar_t v[VEC_ELEMS];
  };
  Vec vx[FOR_LOOP];
  Vec vgate[FOR_LOOP];
  Vec vout[FOR_LOOP];

  // loads of all chunks first
  for (int k = 0; k < FOR_LOOP; k++) {
    const int chunk = blockIdx.x * FOR_LOOP + k;
    const int row = chunk / CHUNKS_PER_ROW;
    const int col = (chunk % CHUNKS_PER_ROW * BLOCK_DIM_X + threadIdx.x) * VEC_ELEMS;
    vx[k] = *reinterpret_cast<Vec const*>(&x_and_gate[(row * 2 + 0) * (int64_t)DIM_LAST + col]);
    vgate[k] = *reinterpret_cast<Vec const*>(&x_and_gate[(row * 2 + 1) * (int64_t)DIM_LAST + col]);
  }
  // then x * gelu(gate) in opmath
  for (int k = 0; k < FOR_LOOP; k++) {
    for (int i = 0; i < VEC_ELEMS; i++) {
      const opmath_t g = gelu(static_cast<opmath_t>(vgate[k].v[i]));
      vout[k].v[i] = static_cast<scalar_t>(static_cast<opmath_t>(vx[k].v[i]) * g);
    }
  }
  // then the stores
  for (int k = 0; k < FOR_LOOP; k++) {
    const int chunk = blockIdx.x * FOR_LOOP + k;
    const int row = chunk / CHUNKS_PER_ROW;
    const int col = (chunk % CHUNKS_PER_ROW * BLOCK_DIM_X + threadIdx.x) * VEC_ELEMS;
    *reinterpret_cast<Vec*>(&out[row * (int64_t)DIM_LAST + col]) = vout[k];
  }
}

// Compile-time dispatch helpers: run the lambda with the runtime value as a constexpr.
#define GEGLU_DISPATCH_DIM_LAST(VALUE, NAME, ...)                                  \
  [&] {                                                                            \
    switch (VALUE) {                                                               \
      case 1280: { constexpr int NAME = 1280; return __VA_ARGS__(); }              \
      case 2560: { constexpr int NAME = 2560; return __VA_ARGS__(); }              \
      case 5120: { constexpr int NAME = 5120; return __VA_ARGS__(); }              \
      default: throw std::invalid_argument("GEGLU_DISPATCH_DIM_LAST " + std::to_string(VALUE)); \
    }                                                                              \
  }()

#define GEGLU_DISPATCH_FOR_LOOP(VALUE, NAME, ...)                                  \
  [&] {                                                                            \
    switch (VALUE) {                                                               \
      case 1: { constexpr int NAME = 1; return __VA_ARGS__(); }                    \
      case 2: { constexpr int NAME = 2; return __VA_ARGS__(); }                    \
      default: throw std::invalid_argument("GEGLU_DISPATCH_FOR_LOOP " + std::to_string(VALUE)); \
    }                                                                              \
  }()

// out [n, dim_last], x_and_gate [n, 2 * dim_last] (value half, then gate half), fp16 device pointers as integers.
void geglu_cuda(intptr_t out_, intptr_t x_and_gate_, int64_t n, int dim_last, intptr_t stream_) {
  using scalar_t = half;
  using opmath_t = float;
  scalar_t* out = reinterpret_cast<scalar_t*>(out_);
  scalar_t const* x_and_gate = reinterpret_cast<scalar_t const*>(x_and_gate_);
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_);
  constexpr int VEC_ELEMS = 8;
  constexpr int BLOCK_DIM_X = 160;
  int for_loop = 2;
  while (for_loop > 0 && n * dim_last % (BLOCK_DIM_X * VEC_ELEMS * for_loop) != 0) {
    for_loop /= 2;
  }
  if (for_loop == 0) {
    throw std::invalid_argument("cannot determine grid_dim");
  }
  const dim3 grid_dim(static_cast<unsigned>(n * dim_last / (BLOCK_DIM_X * VEC_ELEMS * for_loop)));
  GEGLU_DISPATCH_FOR_LOOP(for_loop, FOR_LOOP, [&] {
    GEGLU_DISPATCH_DIM_LAST(dim_last, DIM_LAST, [&] {
      geglu_kernel<scalar_t, opmath_t, BLOCK_DIM_X, DIM_LAST, VEC_ELEMS, FOR_LOOP>
          <<<grid_dim, BLOCK_DIM_X, 0, stream>>>(out, x_and_gate);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}
