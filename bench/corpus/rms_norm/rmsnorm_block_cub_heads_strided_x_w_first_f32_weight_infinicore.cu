// RMSNorm as InfiniCore (InfiniTensor's operator library behind InfiniLM) writes it for NVIDIA GPUs
// (src/infiniop/ops/rms_norm: cuda/kernel.cuh rmsnormBlock, nvidia/rms_norm_nvidia.cu rmsnormKernel and launchKernel,
// reduce/cuda/reduce.cuh sumSquared), the bf16-activation / fp32-weight instantiation:
//   rms = rsqrtf(sum(x^2) / dim + eps)         y = Tdata(x * w * rms)      (Tcompute = float, one rounding)
// with the WEIGHT multiplied before the inverse rms (x * w first, then * rms), as that kernel writes it.
// InfiniCore's conventions: tensors of shape [batch, nhead, dim] (2-D [batch, dim] is nhead = 1) described by their
// strides, so one block normalizes one (batch, head) row found by blockIdx.x / nhead and blockIdx.x % nhead and
// moved by ptrdiff_t stride_*_batch / stride_*_nhead (here y is contiguous and x a view with its own row stride:
// hidden rows of 4096, or, for the per-head q norm of a Qwen3-style model, the q heads of a fused qkv projection
// row [(nhead + 2 * nkvhead) * dim]); size_t nhead and dim; the
// block size a template parameter BLOCK_SIZE picked by the launcher from the device's maxThreadsPerBlock (1024 on
// Hopper), used as the loop stride whatever the row length; the sum of squares through cub::BlockReduce<float,
// BLOCK_SIZE>::Sum in a device helper, valid in thread 0 only, which publishes rms through a __shared__ Tcompute;
// a device function (rmsnormBlock) doing the work behind a thin INFINIOP_CUDA_KERNEL wrapper, and a LAUNCH_KERNEL
// macro over the (activation, weight) dtype pairs.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cub/block/block_reduce.cuh>
#include <cstddef>
#include <cstdint>

#define INFINIOP_CUDA_KERNEL __global__ void

#define CUDA_BLOCK_SIZE_4096 4096
#define CUDA_BLOCK_SIZE_2048 2048
#define CUDA_BLOCK_SIZE_1024 1024
#define CUDA_BLOCK_SIZE_512 512

using cuda_bfloat16 = nv_bfloat16;

typedef enum {
    INFINI_DTYPE_F16 = 12,
    INFINI_DTYPE_F32 = 13,
    INFINI_DTYPE_BF16 = 19,
} infiniDtype_t;

typedef enum {
    INFINI_STATUS_SUCCESS = 0,
    INFINI_STATUS_BAD_TENSOR_DTYPE = 10,
    INFINI_STATUS_DEVICE_ARCHITECTURE_NOT_SUPPORTED = 11,
} infiniStatus_t;

namespace op::common_cuda::reduce_op {

// Sum(x^2) over `count` contiguous values; only thread 0's result is the block's sum.
template <unsigned int BLOCK_SIZE, typename Tdata, typename Tcompute>
__device__ __forceinline__ Tcompute sumSquared(const Tdata *data_ptr, size_t count) {
    Tcompute ss = 0;
    for (size_t i = threadIdx.x; i < count; i += BLOCK_SIZE) {
        Tcompute v = Tcompute(data_ptr[i]);
        ss += v * v;
    }
    using BlockReduce = cub::BlockReduce<Tcompute, BLOCK_SIZE>;
    __shared__ typename BlockReduce::TempStorage temp_storage;
    return BlockReduce(temp_storage).Sum(ss);
}

} // namespace op::common_cuda::reduce_op

template <unsigned int BLOCK_SIZE, typename Tcompute, typename Tdata, typename Tweight>
__device__ void rmsnormBlock(
    Tdata *__restrict__ y,
    ptrdiff_t stride_y_batch,
    ptrdiff_t stride_y_nhead,
    const Tdata *__restrict__ x,
    ptrdiff_t stride_x_batch,
    ptrdiff_t stride_x_nhead,
    const Tweight *__restrict__ w,
    size_t nhead,
    size_t dim,
    float epsilon) {
    // one block per (batch, head) row, each thread every BLOCK_SIZE-th element of it
    size_t batch_idx = blockIdx.x / nhead;
    size_t head_idx = blockIdx.x % nhead;

    auto y_ptr = y + batch_idx * stride_y_batch + head_idx * stride_y_nhead;
    auto x_ptr = x + batch_idx * stride_x_batch + head_idx * stride_x_nhead;
    auto w_ptr = w;

    Tcompute ss = op::common_cuda::reduce_op::sumSquared<BLOCK_SIZE, Tdata, Tcompute>(x_ptr, dim);

    __shared__ Tcompute rms;
    if (threadIdx.x == 0) {
        rms = Tcompute(rsqrtf(ss / Tcompute(dim) + epsilon));
    }
    __syncthreads();

    for (size_t i = threadIdx.x; i < dim; i += BLOCK_SIZE) {
        y_ptr[i] = Tdata(Tcompute(x_ptr[i]) * Tcompute(w_ptr[i]) * rms);
    }
}

/* kerntune:
args  = ["y: out bf16[batch * nhead * dim]", "stride_y_batch: i64 = nhead * dim", "stride_y_nhead: i64 = dim",
         "x: in bf16[batch * xrow]", "stride_x_batch: i64 = xrow", "stride_x_nhead: i64 = dim", "w: in f32[dim]",
         "nhead: u64 = nhead", "dim: u64 = dim", "epsilon: f32 = 1e-6"]
sizes = [{ batch = 8192, nhead = 1, dim = 4096, xrow = 4096 }, { batch = 4, nhead = 32, dim = 128, xrow = 6144 },
         { batch = 1001, nhead = 7, dim = 80, xrow = 720 }]
grid  = "batch * nhead"
block = 1024
template_args = ["1024", "float", "cuda_bfloat16", "float"]
*/
template <unsigned int BLOCK_SIZE, typename Tcompute, typename Tdata, typename Tweight>
INFINIOP_CUDA_KERNEL rmsnormKernel(
    Tdata *__restrict__ y,
    ptrdiff_t stride_y_batch,
    ptrdiff_t stride_y_nhead,
    const Tdata *__restrict__ x,
    ptrdiff_t stride_x_batch,
    ptrdiff_t stride_x_nhead,
    const Tweight *__restrict__ w,
    size_t nhead,
    size_t dim,
    float epsilon) {
    rmsnormBlock<BLOCK_SIZE, Tcompute>(y, stride_y_batch, stride_y_nhead, x, stride_x_batch, stride_x_nhead, w, nhead,
                                       dim, epsilon);
}

namespace op::rms_norm::nvidia {

// launch kernel with different data types
template <unsigned int BLOCK_SIZE>
infiniStatus_t launchKernel(
    uint32_t batch_size, size_t nhead, size_t dim,
    void *y, infiniDtype_t atype, ptrdiff_t stride_y_batch, ptrdiff_t stride_y_nhead,
    const void *x, ptrdiff_t stride_x_batch, ptrdiff_t stride_x_nhead,
    const void *w, infiniDtype_t wtype,
    float epsilon,
    cudaStream_t cuda_stream) {

#define LAUNCH_KERNEL(Tdata, Tweight, Tcompute)                                                              \
    rmsnormKernel<BLOCK_SIZE, Tcompute, Tdata, Tweight><<<batch_size * nhead, BLOCK_SIZE, 0, cuda_stream>>>( \
        reinterpret_cast<Tdata *>(y),                                                                        \
        stride_y_batch,                                                                                      \
        stride_y_nhead,                                                                                      \
        reinterpret_cast<const Tdata *>(x),                                                                  \
        stride_x_batch,                                                                                      \
        stride_x_nhead,                                                                                      \
        reinterpret_cast<const Tweight *>(w),                                                                \
        nhead,                                                                                               \
        dim,                                                                                                 \
        epsilon)

    if (atype == INFINI_DTYPE_F16 && wtype == INFINI_DTYPE_F16) {
        LAUNCH_KERNEL(half, half, float);
    } else if (atype == INFINI_DTYPE_F16 && wtype == INFINI_DTYPE_F32) {
        LAUNCH_KERNEL(half, float, float);
    } else if (atype == INFINI_DTYPE_BF16 && wtype == INFINI_DTYPE_BF16) {
        LAUNCH_KERNEL(cuda_bfloat16, cuda_bfloat16, float);
    } else if (atype == INFINI_DTYPE_BF16 && wtype == INFINI_DTYPE_F32) {
        LAUNCH_KERNEL(cuda_bfloat16, float, float);
    } else if (atype == INFINI_DTYPE_F32 && wtype == INFINI_DTYPE_F32) {
        LAUNCH_KERNEL(float, float, float);
    } else {
        return INFINI_STATUS_BAD_TENSOR_DTYPE;
    }

#undef LAUNCH_KERNEL

    return INFINI_STATUS_SUCCESS;
}

// y [batch, nhead, dim] and x [batch, nhead, dim] by their strides (in elements), w [dim]; device pointers;
// max_threads_per_block is the device's (cudaDevAttrMaxThreadsPerBlock).
infiniStatus_t calculate(void *y, infiniDtype_t atype, const void *x, const void *w, infiniDtype_t wtype,
                         size_t batch, size_t nhead, size_t dim,
                         ptrdiff_t stride_y_batch, ptrdiff_t stride_y_nhead,
                         ptrdiff_t stride_x_batch, ptrdiff_t stride_x_nhead,
                         float epsilon, int max_threads_per_block, void *stream) {
    uint32_t batch_size = static_cast<uint32_t>(batch);
    auto cuda_stream = reinterpret_cast<cudaStream_t>(stream);

    // launch kernel with different block sizes
    if (max_threads_per_block == CUDA_BLOCK_SIZE_1024) {
        return launchKernel<CUDA_BLOCK_SIZE_1024>(batch_size, nhead, dim, y, atype, stride_y_batch, stride_y_nhead, x,
                                                  stride_x_batch, stride_x_nhead, w, wtype, epsilon, cuda_stream);
    } else if (max_threads_per_block == CUDA_BLOCK_SIZE_512) {
        return launchKernel<CUDA_BLOCK_SIZE_512>(batch_size, nhead, dim, y, atype, stride_y_batch, stride_y_nhead, x,
                                                 stride_x_batch, stride_x_nhead, w, wtype, epsilon, cuda_stream);
    }
    return INFINI_STATUS_DEVICE_ARCHITECTURE_NOT_SUPPORTED;
}

} // namespace op::rms_norm::nvidia
