// Multiclass softmax as LightGBM's CUDA objective writes it when it turns raw boosting scores into class
// probabilities (microsoft/LightGBM, src/objective/cuda/cuda_multiclass_objective.cu: the device SoftmaxCUDA helper and
// ConvertOutputCUDAKernel_MulticlassSoftmax behind CUDAMulticlassSoftmax::LaunchConvertOutputCUDAKernel), double:
//   input, output [num_class, num_data] CLASS-MAJOR (score of class k for data point i at k * num_data + i: one
//   boosting tree per class, each writing its own contiguous score vector), softmax over the classes of each data
//   point; ONE THREAD PER DATA POINT, 1024 threads (GET_GRADIENTS_BLOCK_SIZE_MULTICLASS), grid ceil(num_data / 1024),
//   default stream; the thread gathers its strided column into a row of a global scratch buffer
//   cuda_softmax_buffer [num_data, num_class] (row-major, data_index * num_class), runs the serial three-loop
//   softmax there in place (max; exp(x - max) stored and summed; divide), then scatters the row back class-major;
//   fp64 exp and division throughout; data_size_t is int32; argument order (num_class, num_data, input, buffer, output)
// Fixed: the launcher sized the grid from the objective's training-set num_data_ while the kernel guards with the
// num_data argument, so converting more rows than were trained on left rows unconverted; the grid now comes from the
// num_data argument. The class's members become plain arguments (the buffer is a device pointer the caller owns).
#include <cuda_runtime.h>

#include <cstdint>

#define GET_GRADIENTS_BLOCK_SIZE_MULTICLASS (1024)

namespace LightGBM {

typedef int32_t data_size_t;

__device__ void SoftmaxCUDA(double* softmax_buffer, int len) {
  double wmax = softmax_buffer[0];
  for (int i = 1; i < len; ++i) {
    wmax = max(softmax_buffer[i], wmax);
  }
  double wsum = 0.0f;
  for (int i = 0; i < len; ++i) {
    softmax_buffer[i] = exp(softmax_buffer[i] - wmax);
    wsum += softmax_buffer[i];
  }
  for (int i = 0; i < len; ++i) {
    softmax_buffer[i] /= static_cast<double>(wsum);
  }
}

// Tolerance: the outputs are probabilities of about 1 / num_class (down to 1e-7 for the extreme scores), far below
// the default absolute tolerance, so atol is 1e-9; fp64 throughout, rtol stays the default.
/* kerntune:
args  = ["num_class: i32 = C", "num_data: i32 = N", "input: in f64[C * N] ~ uniform(-6, 6)",
         "cuda_softmax_buffer: out f64[N * C]", "output: out f64[C * N]"]
sizes = [{ N = 1048576, C = 8 }, { N = 4, C = 1000 }, { N = 99999, C = 7 }]
grid  = "cdiv(N, 1024)"
block = 1024
atol  = 1e-9
*/
__global__ void ConvertOutputCUDAKernel_MulticlassSoftmax(const int num_class,
                                                          const data_size_t num_data,
                                                          const double* input,
                                                          double* cuda_softmax_buffer,
                                                          double* output) {
  const data_size_t data_index = static_cast<data_size_t>(threadIdx.x + blockIdx.x * blockDim.x);
  if (data_index < num_data) {
    const data_size_t offset = data_index * num_class;
    double* cuda_softmax_buffer_ptr = cuda_softmax_buffer + offset;
    // gather the class-major column of this data point into its scratch row
    for (int class_index = 0; class_index < num_class; ++class_index) {
      cuda_softmax_buffer_ptr[class_index] = input[class_index * num_data + data_index];
    }
    SoftmaxCUDA(cuda_softmax_buffer_ptr, num_class);
    for (int class_index = 0; class_index < num_class; ++class_index) {
      output[class_index * num_data + data_index] = cuda_softmax_buffer_ptr[class_index];
    }
  }
}

// input, output: device [num_class, num_data] raw scores / probabilities; cuda_softmax_buffer: device
// [num_data, num_class] scratch. Runs on the default stream as LightGBM's objective does.
const double* LaunchConvertOutputCUDAKernel(const int num_class, const data_size_t num_data, const double* input,
                                            double* cuda_softmax_buffer, double* output) {
  const int num_blocks =
      (num_data + GET_GRADIENTS_BLOCK_SIZE_MULTICLASS - 1) / GET_GRADIENTS_BLOCK_SIZE_MULTICLASS;
  ConvertOutputCUDAKernel_MulticlassSoftmax<<<num_blocks, GET_GRADIENTS_BLOCK_SIZE_MULTICLASS>>>(
      num_class, num_data, input, cuda_softmax_buffer, output);
  return output;
}

}  // namespace LightGBM
