// GEGLU of a diffusion UNet's transformer feed-forward as ONNX Runtime's contrib op BiasSplitGelu computes it
// (Stable Diffusion's GEGLU: proj(x) = [hidden_states | gate], out = hidden_states * gelu(gate)), after the
// projection GEMM without its bias, so the bias is added here:
//   input  fp16 [tokens, 2 * half_hidden]   (the VALUE half first, the GATE half second)
//   bias   fp16 [2 * half_hidden]
//   left   = float(input[t, j] + bias[j])                          (the add in fp16, rounded, then widened)
//   right  = float(input[t, j + H] + bias[j + H])
//   output fp16 [tokens, half_hidden] = half(left * (right * 0.5f * (erff(right / 1.41421356237f) + 1.0f)))
// The activation is the exact erf GELU, applied to the SECOND half, and multiplies the first.
// ORT's kernel shape: template <typename T, int32_t HHS, int32_t TPB> with the half hidden size a template
// argument, one block of TPB = 256 threads per token (the grid is the token count), each thread stepping HHS / TPB
// times by TPB with three running indices (input, output, bias); the host switches on the half hidden size
// (1280, 2560, 5120: SD 1.x / 2.x / XL channel widths times four) and refuses the rest.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace onnxruntime {
namespace contrib {
namespace cuda {

/* kerntune:
args  = ["input: in f16[grid_size * 2 * 1280]", "bias: in f16[2 * 1280]", "output: out f16[grid_size * 1280]"]
sizes = [{ grid_size = 16384 }, { grid_size = 8 }, { grid_size = 77 }]
grid  = "grid_size"
block = 256
template_args = ["half", "1280", "256"]
*/
template <typename T, int32_t HHS, int32_t TPB>
__global__ void biasSplitGeluKernel(T const* input, T const* bias, T* output) {
  int32_t index_input = blockIdx.x * HHS * 2 + threadIdx.x;
  int32_t index_output = blockIdx.x * HHS + threadIdx.x;
  int32_t index_bias = threadIdx.x;

#pragma unroll
  for (int32_t i = 0; i < HHS / TPB; ++i) {
    const float value_left = static_cast<float>(input[index_input] + bias[index_bias]);
    const float value_right = static_cast<float>(input[index_input + HHS] + bias[index_bias + HHS]);

    // Gelu on the gate (right) half only: x * 0.5 * (1 + erf(x / sqrt(2)))
    const float gelu_right = value_right * 0.5f * (erff(value_right / 1.41421356237f) + 1.0f);
    const float result = value_left * gelu_right;
    output[index_output] = static_cast<T>(result);

    index_input += TPB;
    index_output += TPB;
    index_bias += TPB;
  }
}

// grid_size = batch * height * width tokens; device pointers. Returns false for a width it has no kernel for.
template <typename T>
bool LaunchBiasSplitGeluKernel(cudaStream_t stream, int32_t grid_size, int32_t half_hidden_size, T const* input,
                               T const* bias, T* output) {
  constexpr int32_t TPB = 256;  // threads per block
  switch (half_hidden_size) {
    case 1280:
      biasSplitGeluKernel<T, 1280, TPB><<<grid_size, TPB, 0, stream>>>(input, bias, output);
      break;
    case 2560:
      biasSplitGeluKernel<T, 2560, TPB><<<grid_size, TPB, 0, stream>>>(input, bias, output);
      break;
    case 5120:
      biasSplitGeluKernel<T, 5120, TPB><<<grid_size, TPB, 0, stream>>>(input, bias, output);
      break;
    default:
      return false;
  }
  return cudaGetLastError() == cudaSuccess;
}

template bool LaunchBiasSplitGeluKernel<half>(cudaStream_t, int32_t, int32_t, half const*, half const*, half*);

}  // namespace cuda
}  // namespace contrib
}  // namespace onnxruntime
