// RMSNorm as CTranslate2 writes it (src/ops/rms_norm_gpu.cu), float32 compute type:
//   inv_rms = rsqrtf(sum(x^2) / depth + epsilon)
//   y = x * inv_rms * gamma              (use_residual == false: Llama / Mistral)
//   y = x * inv_rms * (1 + gamma)        (use_residual == true: Gemma's weight stored as its offset from 1)
// CTranslate2's conventions: argument order (input, gamma, output, depth, epsilon, use_residual), the Gemma
// offset chosen by a RUN-TIME bool the op carries (not a template), depth as cuda::index_t (unsigned int),
// one batch row per block with no bound on the grid (the op launches input.size() / depth blocks), a fixed
// constexpr num_threads = 512 that is both the cub::BlockReduce width and the launch block, the sum of squares
// reduced by cub into thread 0 which publishes the inverse rms through a __shared__ float, a second read of the
// row from global memory, fp32 math with the conversion to T at the store (one rounding; none for float).
#include <cuda_runtime.h>
#include <cub/block/block_reduce.cuh>
#include <cstdint>

namespace ctranslate2 {
  using dim_t = int64_t;

  namespace cuda {
    using index_t = unsigned int;
  }

  namespace ops {

    constexpr dim_t num_threads = 512;

    /* kerntune:
    args  = ["input: in f32[batch_size * depth]", "gamma: in f32[depth]", "output: out f32[batch_size * depth]",
             "depth: u32 = depth", "epsilon: f32 = 1e-6", "use_residual: u8 = 0"]
    sizes = [{ batch_size = 8192, depth = 4096 }, { batch_size = 6, depth = 5120 },
             { batch_size = 1001, depth = 3077 }]
    grid  = "batch_size"
    block = 512
    template_args = ["float"]
    */
    template <typename T>
    __global__ void rms_norm_kernel(const T* input,
                                    const T* gamma,
                                    T* output,
                                    cuda::index_t depth,
                                    float epsilon,
                                    bool use_residual) {
      typedef cub::BlockReduce<float, num_threads> BlockReduce;
      __shared__ typename BlockReduce::TempStorage temp_storage;
      __shared__ float s_inv_rms;

      input += blockIdx.x * depth;
      output += blockIdx.x * depth;

      float sum_squares = 0;
      for (cuda::index_t i = threadIdx.x; i < depth; i += blockDim.x) {
        const float v = float(input[i]);
        sum_squares += v * v;
      }
      sum_squares = BlockReduce(temp_storage).Sum(sum_squares);  // valid in thread 0 only

      if (threadIdx.x == 0)
        s_inv_rms = rsqrtf(sum_squares / depth + epsilon);

      __syncthreads();

      for (cuda::index_t i = threadIdx.x; i < depth; i += blockDim.x) {
        if (use_residual)
          output[i] = T(float(input[i]) * s_inv_rms * (1 + float(gamma[i])));
        else
          output[i] = T(float(input[i]) * s_inv_rms * float(gamma[i]));
      }
    }

    // RMSNorm::compute for the CUDA device: input [..., depth] flattened to batch_size rows, gamma [depth],
    // output like input; device pointers.
    template <typename T>
    void rms_norm_compute(const T* gamma,
                          const T* input,
                          T* output,
                          dim_t batch_size,
                          dim_t depth,
                          float epsilon,
                          bool use_residual,
                          cudaStream_t stream) {
      rms_norm_kernel<<<batch_size, num_threads, 0, stream>>>(input,
                                                               gamma,
                                                               output,
                                                               depth,
                                                               epsilon,
                                                               use_residual);
    }

    template void rms_norm_compute<float>(const float*, const float*, float*, dim_t, dim_t, float, bool,
                                          cudaStream_t);

  }
}
