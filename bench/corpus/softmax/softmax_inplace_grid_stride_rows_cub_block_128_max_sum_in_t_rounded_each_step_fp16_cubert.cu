// Row softmax in the style of zhihu's cuBERT (zhihu/cuBERT, src/cuBERT/op/Softmax.cu: softmax_<T> as used on the
// BERT attention scores [batch * heads * seq, seq] and the classifier logits), half instantiation:
//   IN PLACE on inout [batch_size, channel]; namespace cuBERT, template <typename T>, explicit instantiation,
//   stream passed as void * and cast; argument order inout, batch_size, channel, sum_gpu
//   cuBERT runs five launches (kernel_max_cub -> kernel_substract_ -> thrust::transform exp_functor ->
//   kernel_sum_cub -> kernel_scale_) through global memory; here they are ONE kernel that keeps every rounding of
//   that pipeline: the row max is stored as T (it went through the T buffer sum_gpu), x - max is rounded to T and
//   written back, exp is __expf of that T and rounded to T (exp_functor), the sum of the rounded exponentials is
//   taken in float and rounded to T (sum_gpu, left holding the row sums as cuBERT leaves it), and the output is
//   float(e) / float(sum) rounded to T
//   rows grid-strided over the blocks (for i = blockIdx.x; i < batch_size; i += gridDim.x), launched with grid =
//   batch_size and 128 threads; cub::BlockReduce<float, 128> (Reduce with cub::Max, Sum), thread 0 publishes, the
//   columns strided by blockDim.x; CUB_MAX, -FLT_MAX seed (CUB_MAX / cub::Max
//   spelled for the CCCL in use)
// Changed: the __ldg loads of the original kernels are plain loads here, because the fused kernel writes the rows
// it reads (each thread re-reads only elements it wrote itself); the shared broadcast slot and the barriers between
// reuses of the cub TempStorage are what the fusion needs. No bug found in the original pipeline.
// Tolerance: probabilities over hundreds of columns are well below the default absolute tolerance; atol is 1e-6.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <float.h>

#include "cub/cub.cuh"

// Newer CCCL drops CUB_MAX and cub::Max, which cuBERT's kernels use.
#ifndef CUB_MAX
#define CUB_MAX(a, b) (((b) > (a)) ? (b) : (a))
#endif
#if CUB_VERSION >= 200800
#include <cuda/functional>
using CubMaxOp = cuda::maximum<>;
#else
using CubMaxOp = cub::Max;
#endif

namespace cuBERT {

/* kerntune:
args  = ["inout: inout f16[batch * channel]", "batch_size: i32 = batch", "channel: i32 = channel",
         "sum_gpu: out f16[batch]"]
sizes = [{ batch = 98304, channel = 512 }, { batch = 12, channel = 128 }, { batch = 1001, channel = 333 }]
template_args = ["half"]
grid  = "batch"
block = 128
atol  = 1e-6
*/
template <typename T>
__global__ void kernel_softmax_cub(T *inout,
                                   const int batch_size,
                                   const int channel,
                                   T *sum_gpu) {
    __shared__ typename cub::BlockReduce<float, 128>::TempStorage temp_storage;
    __shared__ float s_val;
    for (int i = blockIdx.x; i < batch_size; i += gridDim.x) {
        T *row = inout + i * channel;

        // max of the row (kernel_max_cub), kept as T like the sum_gpu buffer it went through
        float val = -FLT_MAX;
        for (int j = threadIdx.x; j < channel; j += blockDim.x) {
            val = CUB_MAX((float) row[j], val);
        }
        val = cub::BlockReduce<float, 128>(temp_storage).Reduce(val, CubMaxOp());
        if (threadIdx.x == 0) {
            s_val = (float) T(val);
        }
        __syncthreads();
        const float max_val = s_val;

        // x - max rounded to T (kernel_substract_), then exp rounded to T (exp_functor), summed in float
        float s_sum = 0.f;
        for (int j = threadIdx.x; j < channel; j += blockDim.x) {
            const T diff = (float) row[j] - max_val;
            const T e = T(__expf((float) diff));
            row[j] = e;
            s_sum += (float) e;
        }
        s_sum = cub::BlockReduce<float, 128>(temp_storage).Sum(s_sum);
        if (threadIdx.x == 0) {
            const T sum_t = s_sum;
            sum_gpu[i] = sum_t;
            s_val = (float) sum_t;
        }
        __syncthreads();
        const float sum_val = s_val;

        // scale (kernel_scale_)
        for (int j = threadIdx.x; j < channel; j += blockDim.x) {
            row[j] = (float) row[j] / sum_val;
        }
        __syncthreads();
    }
}

// inout: device [batch_size, channel]; sum_gpu: device [batch_size] scratch, left holding the row sums.
template <typename T>
__host__ void softmax_(T *inout, const int batch_size, const int channel, T *sum_gpu, void *stream) {
    kernel_softmax_cub<T> <<<batch_size, 128, 0, (cudaStream_t) stream>>> (inout, batch_size, channel, sum_gpu);
}

template
__host__ void softmax_<half>(half *inout, const int batch_size, const int channel, half *sum_gpu, void *stream);

}  // namespace cuBERT
