// SwiGLU forward in the style of PKU-DAIR's Hetu (PKU-DAIR/Hetu, hetu/impl/kernel/SwiGLU.cu: swiglu_kernel<spec_t>
// behind SwigluCuda, the LLaMA MLP activation of Hetu's distributed training system), bf16 instantiation:
//   input [tokens, 2 * d] -> output [tokens, d], out of place; the FIRST half of each row is the gate x, the second
//   half the up projection y: out = y * silu(x)
//   flat grid, ONE THREAD PER OUTPUT ELEMENT: idx = blockIdx.x * blockDim.x + threadIdx.x (unsigned), guard
//   idx >= size, input index (idx / d) * (2 * d) + idx % d and + d; argument order input, size, d, output
//   host: threads.x = MIN(size, HT_DEFAULT_NUM_THREADS_PER_BLOCK = 1024), blocks.x = DIVUP(size, 1024), stream
//   from the caller; HT_DISPATCH over the dtype is the explicit bf16 launch here
//   rounding: hetu::cuda::cuda_exp<bfloat16> is hexp (sm_80+), so exp(-x) is rounded to bf16; the rest is float
//   (float(y) * float(x / (1 + e))) and the product is rounded once at the store
// Changed: Hetu passes OffsetCalculator pointers (device structs mapping logical to strided offsets); for the
// contiguous tensors of the MLP they are the identity and are left out here. hetu::bfloat16 is __nv_bfloat16.
// No bug found.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#define HT_DEFAULT_NUM_THREADS_PER_BLOCK (1024)
#define MIN(x, y) ((x) < (y) ? (x) : (y))
#define DIVUP(x, y) (((x) + (y) -1) / (y))

namespace hetu {
namespace cuda {

template <typename T>
__forceinline__ __device__ T cuda_exp(T x);

template <>
__forceinline__ __device__ __nv_bfloat16 cuda_exp<__nv_bfloat16>(__nv_bfloat16 x) {
#if (__CUDA_ARCH__ >= 800)
  return hexp(x);
#else
  return static_cast<__nv_bfloat16>(expf(float(x)));
#endif
}

} // namespace cuda

namespace impl {

/* kerntune:
args  = ["input: in bf16[tokens * 2 * d]", "size: u64 = tokens * d", "d: u64 = d", "output: out bf16[tokens * d]"]
sizes = [{ tokens = 4096, d = 11008 }, { tokens = 4, d = 14336 }, { tokens = 1001, d = 2731 }]
template_args = ["__nv_bfloat16"]
grid  = "cdiv(tokens * d, 1024)"
block = "min(tokens * d, 1024)"
*/
template <typename spec_t>
/*
  input [seq_len, d * 2] -> output [seq_len, d]
*/
__global__ void swiglu_kernel(const spec_t* input, size_t size, size_t d, spec_t* output) {
  auto idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= size)
    return;
  auto in_idx = (idx / d) * (2 * d) + (idx % d);
  spec_t x = input[in_idx];
  spec_t y = input[in_idx + d];
  spec_t e = hetu::cuda::cuda_exp<spec_t>(-x);
  output[idx] = float(y) * (float(x) / (1.0f + float(e)));
}

// input: device [tokens, 2 * d] bf16 (gate | up), contiguous; output: device [tokens, d].
void SwigluCuda(const __nv_bfloat16* input, __nv_bfloat16* output, size_t tokens, size_t d,
                cudaStream_t stream) {
  size_t size = tokens * d;
  size_t d_size = d;
  if (size == 0)
    return;
  dim3 blocks, threads;
  threads.x = MIN(size, (size_t) HT_DEFAULT_NUM_THREADS_PER_BLOCK);
  blocks.x = DIVUP(size, (size_t) HT_DEFAULT_NUM_THREADS_PER_BLOCK);
  swiglu_kernel<__nv_bfloat16><<<blocks, threads, 0, stream>>>(input, size, d_size, output);
}

} // namespace impl
} // namespace hetu
