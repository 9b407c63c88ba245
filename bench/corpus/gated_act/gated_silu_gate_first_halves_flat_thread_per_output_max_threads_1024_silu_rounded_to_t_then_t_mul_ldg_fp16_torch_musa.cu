// Gated SiLU in the style of torch_musa (MooreThreads/torch_musa, torch_musa/csrc/aten/ops/musa/GatedSilu.mu:
// gated_silu_kernel behind gated_silu_output / GatedSilu, registered as torch.ops.aten gated_silu for the MUSA
// device; torch_musa is Moore Threads' PyTorch backend for its MUSA GPUs, whose kernels are written in CUDA's
// dialect and compiled by mcc), ported back to CUDA:
//   input [..., 2 * hidden_size] contiguous, GATE HALF FIRST (x = input[row][col], y = input[row][hidden_size +
//   col]), out [..., hidden_size]; fp32 or fp16 (the dispatch checks the dtype);
//   ONE THREAD PER OUTPUT ELEMENT over the flat output index, no grid-stride loop: MAX_THREADS = 1024 threads a
//   block, (element_num - 1) / MAX_THREADS + 1 blocks, an early return past element_num; the input index is
//   rebuilt from the flat index as idx / hidden_size * 2 * hidden_size + idx % hidden_size;
//   both operands read through __ldg;
//   silu(x) = x / (1 + expf(-x)) computed in fp32 and ROUNDED TO T by the device function (it returns T), then
//   multiplied by y in T: for fp16 a half multiply (__hmul), a second rounding.
// Fixed: the flat index, element_num and the input index were 32-bit ints; the input index reaches twice the output
// count, so past 2^30 outputs (an input of more than 2^31 elements, e.g. 65536 tokens x 2 x 16384) it wrapped and
// the kernel read out of bounds: 64-bit here (element_num an int64_t argument).
// Changed: the ATen dispatch (AT_DISPATCH_ALL_MTGPU_TYPES_AND_HALF) and tensor checks became a templated C++
// launcher with device pointers, sizes and a stream, instantiated for float and __half; musa runtime types are the
// CUDA ones.
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace at {
namespace musa {

#define MAX_THREADS 1024

template <typename T>
__device__ __forceinline__ T silu(const T& x) {
  // fp32 math, rounded back to T on return
  return (T)(((float)x) / (1.0f + expf((float)-x)));
}

/* kerntune:
args  = ["out_ptr: out f16[M * D]", "input_ptr: in f16[M * 2 * D]", "hidden_size: i32 = D",
         "element_num: i64 = M * D"]
sizes = [{ M = 8192, D = 11008 }, { M = 4, D = 11008 }, { M = 1001, D = 4099 }]
grid  = "cdiv(M * D, 1024)"
block = 1024
template_args = ["__half"]
*/
template <typename T>
__global__ void gated_silu_kernel(T* out_ptr, const T* input_ptr, const int hidden_size, const int64_t element_num) {
  // one output element per thread; 64-bit flat index (fixed)
  const int64_t cur_element_idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (cur_element_idx >= element_num) {
    return;
  }
  const int64_t row = cur_element_idx / hidden_size;
  const int64_t col = cur_element_idx % hidden_size;
  const int64_t input_x_idx = row * 2 * hidden_size + col;  // gate half
  const int64_t input_y_idx = input_x_idx + hidden_size;     // up half

  const T x = __ldg(&input_ptr[input_x_idx]);
  const T y = __ldg(&input_ptr[input_y_idx]);
  out_ptr[cur_element_idx] = silu(x) * y;  // T * T: rounded again for fp16
}

}  // namespace musa
}  // namespace at

// input: device [num_tokens, 2 * hidden_size] (gate half first); out: device [num_tokens, hidden_size].
template <typename scalar_t>
void gated_silu_output(const scalar_t* input, scalar_t* out, int64_t num_tokens, int hidden_size,
                       cudaStream_t stream) {
  const int64_t element_num = num_tokens * (int64_t)hidden_size;  // out.numel()
  if (element_num == 0) return;

  size_t block_num = (element_num - 1) / MAX_THREADS + 1;
  dim3 grid(block_num);
  dim3 block(MAX_THREADS);

  at::musa::gated_silu_kernel<scalar_t><<<grid, block, 0, stream>>>(out, input, hidden_size, element_num);
}

template void gated_silu_output<float>(const float*, float*, int64_t, int, cudaStream_t);
template void gated_silu_output<__half>(const __half*, __half*, int64_t, int, cudaStream_t);
