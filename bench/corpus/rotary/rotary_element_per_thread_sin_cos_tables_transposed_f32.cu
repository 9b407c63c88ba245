// Rotary embedding as CTranslate2 writes it (src/ops/rotary_gpu.cu), float32 compute type: no position ids;
// the caller has already sliced the sin and cos tables [max_time, ndims] to the positions of this step (offset
// applied on the host), and the tables are FULL width ndims (each frequency duplicated: cat(f, f) for the
// non-interleaved layout, repeat_interleave for the interleaved one). One OUTPUT ELEMENT per thread, each output
// reading its own input and its partner:
//   non-interleaved (NeoX / rotate_half):  y[i] = x[i] * cos[i] + (i < ndims / 2 ? -x[i + ndims / 2]
//                                                                             : x[i - ndims / 2]) * sin[i]
//   interleaved (GPT-J):                   y[i] = x[i] * cos[i] + (i % 2 == 0 ? -x[i + 1] : x[i - 1]) * sin[i]
//   i >= ndims (partial rotary):           y[i] = x[i]
// out of place. CTranslate2's conventions: template <T, bool interleave> with both instantiated and chosen by the
// op's run-time flag, argument order (x, sin, cos, y, max_time, head_size, ndims, depth, transpose) where
// head_size is CTranslate2's name for the number of heads, cuda::index_t (unsigned int) sizes, one row of depth
// elements per block (grid = number of rows, capped at INT32_MAX), block = min(depth, 1024) striding the row;
// transpose = the [batch, heads, time, depth] layout (time = row % max_time), else [batch, time, heads, depth]
// (time = row / head_size, batch 1). Spec = the non-interleaved kernel on the transposed layout.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <limits>

namespace ctranslate2 {
  using dim_t = int64_t;

  namespace cuda {
    using index_t = unsigned int;
    constexpr dim_t max_threads = 1024;
    constexpr dim_t max_blocks = std::numeric_limits<int32_t>::max();
  }

  namespace ops {

    template <typename T>
    struct ComputeType {
      using type = T;
    };

    /* kerntune:
    args  = ["x: in f32[batch * heads * max_time * depth]", "sin: in f32[max_time * ndims] ~ uniform(-1, 1)",
             "cos: in f32[max_time * ndims] ~ uniform(-1, 1)", "y: out f32[batch * heads * max_time * depth]",
             "max_time: u32 = max_time", "head_size: u32 = heads", "ndims: u32 = ndims", "depth: u32 = depth",
             "transpose: u8 = 1"]
    sizes = [{ batch = 4, heads = 32, max_time = 2048, depth = 128, ndims = 128 },
             { batch = 16, heads = 32, max_time = 1, depth = 128, ndims = 128 },
             { batch = 3, heads = 13, max_time = 37, depth = 80, ndims = 32 }]
    grid  = "batch * heads * max_time"
    block = "min(depth, 1024)"
    template_args = ["float", "false"]
    */
    template <typename T, bool interleave>
    __global__ void rotary_kernel(const T* x,
                                  const T* sin,
                                  const T* cos,
                                  T* y,
                                  const cuda::index_t max_time,
                                  const cuda::index_t head_size,
                                  const cuda::index_t ndims,
                                  const cuda::index_t depth,
                                  const bool transpose) {
      const auto time = transpose ? blockIdx.x % max_time : blockIdx.x / head_size;
      const auto middle = ndims / 2;

      x += blockIdx.x * depth;
      y += blockIdx.x * depth;

      sin += time * ndims;
      cos += time * ndims;

      using C = typename ComputeType<T>::type;

      for (cuda::index_t i = threadIdx.x; i < depth; i += blockDim.x) {
        if (i >= ndims)
          y[i] = x[i];
        else if (interleave)
          y[i] = C(x[i]) * C(cos[i]) + (i % 2 == 0 ? -C(x[i + 1]) : C(x[i - 1])) * C(sin[i]);
        else
          y[i] = C(x[i]) * C(cos[i]) + (i < middle ? -C(x[i + middle]) : C(x[i - middle])) * C(sin[i]);
      }
    }

    // Rotary::compute for the CUDA device. input / output: [batch, heads, max_time, depth] when is_transposed,
    // else [batch, max_time, heads, depth]; sin, cos: [max_time, ndims] for this step's positions; ndims = 0
    // means the whole depth. Device pointers.
    template <typename T>
    void rotary_compute(const T* input,
                        const T* sin,
                        const T* cos,
                        T* output,
                        dim_t batch,
                        dim_t dim1,   // heads if transposed, else time
                        dim_t dim2,   // time if transposed, else heads
                        dim_t depth,
                        dim_t rotary_ndims,
                        bool interleave,
                        bool is_transposed,
                        cudaStream_t stream) {
      const dim_t max_time = is_transposed ? dim2 : dim1;
      const dim_t head_size = is_transposed ? dim1 : dim2;
      const dim_t ndims = rotary_ndims == 0 ? depth : rotary_ndims;

      const dim_t blocks = std::min(batch * dim1 * dim2, cuda::max_blocks);
      const dim_t threads = std::min(depth, cuda::max_threads);

      if (interleave)
        rotary_kernel<T, true><<<blocks, threads, 0, stream>>>(
          input, sin, cos, output, max_time, head_size, ndims, depth, is_transposed);
      else
        rotary_kernel<T, false><<<blocks, threads, 0, stream>>>(
          input, sin, cos, output, max_time, head_size, ndims, depth, is_transposed);
    }

    template void rotary_compute<float>(const float*, const float*, const float*, float*, dim_t, dim_t, dim_t,
                                        dim_t, dim_t, bool, bool, cudaStream_t);

  }
}
