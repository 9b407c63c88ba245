// RMSNorm as Qingcheng.AI / Tsinghua PACMAN's Chitu serving engine writes it (csrc/cuda/norm/rms_norm.cu,
// chitu::cuda_rms_norm_kernel<T> behind rms_norm_impl<T>, the op its DeepSeek / Qwen models call for the
// q_a / kv_a norms and the decoder norms). Rows may be a strided view: x and out share the stride of the source
// tensor's rows (x_row_stride, e.g. the kv half of a fused [tokens, 2112] down projection normalized over its first
// 512 columns), and `out` has the same strides as x -- only the first `dim` columns of each out row are written,
// the rest of the out buffer is untouched (the spec makes it inout). x may alias out, so no __restrict__ on them.
// One row per block; the block size is the next power of two >= dim, capped at 1024, and the same number of floats
// of dynamic shared memory. Each thread divides its partial sum of squares by dim BEFORE the reduction
// (shared_data[tid] = sum / dim), then a plain shared-memory tree reduction (s = blockDim.x / 2 ... 1, a
// __syncthreads per level); every element re-reads shared_data[0] and recomputes rsqrt(ms + eps), fp32 math,
// x * rsqrt(ms + eps) * w rounded once to T. size_t offsets and loop counters, as Chitu has them. The torch
// plumbing (tensors, dtype dispatch, current stream) is replaced by raw pointers, sizes and a stream.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstddef>

namespace chitu {

template <typename To, typename From>
__device__ __forceinline__ To to_scalar(From x) {
    return static_cast<To>(x);
}
template <>
__device__ __forceinline__ float to_scalar<float, __nv_bfloat16>(__nv_bfloat16 x) {
    return __bfloat162float(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 to_scalar<__nv_bfloat16, float>(float x) {
    return __float2bfloat16(x);
}
template <>
__device__ __forceinline__ float to_scalar<float, half>(half x) {
    return __half2float(x);
}
template <>
__device__ __forceinline__ half to_scalar<half, float>(float x) {
    return __float2half(x);
}

/* kerntune:
args  = ["x: in bf16[num_rows * x_row_stride]", "w: in bf16[dim]", "out: inout bf16[num_rows * x_row_stride]",
         "dim: i32 = dim", "eps: f32 = 1e-6", "x_row_stride: i64 = x_row_stride"]
sizes = [{ num_rows = 32768, dim = 1536, x_row_stride = 2112 }, { num_rows = 4, dim = 512, x_row_stride = 2112 },
         { num_rows = 1001, dim = 1000, x_row_stride = 1000 }]
grid  = "num_rows"
block = "1024 if dim > 512 else 512 if dim > 256 else 256 if dim > 128 else 128 if dim > 64 else 64 if dim > 32 else 32"
smem  = "4 * (1024 if dim > 512 else 512 if dim > 256 else 256 if dim > 128 else 128 if dim > 64 else 64 if dim > 32 else 32)"
template_args = ["__nv_bfloat16"]
*/
template <typename T>
__global__ void cuda_rms_norm_kernel(const T *x, const T *__restrict__ w,
                                     T *out, int dim, float eps,
                                     size_t x_row_stride) {
    // x and out may be the same buffer: no __restrict__ on them

    extern __shared__ float shared_data[];
    const size_t tid = threadIdx.x;
    size_t row_id = blockIdx.x;
    float sum = 0.0;
    size_t offset = row_id * x_row_stride;
    for (size_t t = tid; t < (size_t)dim; t += blockDim.x) {
        float x_value = to_scalar<float>(x[offset + t]);
        sum += x_value * x_value;
    }
    shared_data[tid] = sum / dim;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < (size_t)s) {
            shared_data[tid] += shared_data[tid + s];
        }
        __syncthreads();
    }
    __syncthreads();
    for (size_t t = tid; t < (size_t)dim; t += blockDim.x) {
        auto x_value = to_scalar<float>(x[offset + t]);
        auto w_value = to_scalar<float>(w[t]);
        out[offset + t] =
            to_scalar<T>(x_value * rsqrtf(shared_data[0] + eps) * w_value);
    }
}

// x, out: device pointers to [num_rows, x_row_stride] rows (normalized over the first num_cols columns);
// w: [num_cols].
template <typename T>
void rms_norm_impl(const T *x, const T *w, T *out, int num_rows, int num_cols,
                   float eps, size_t x_row_stride, cudaStream_t stream) {
    dim3 grid_dim(num_rows);
    size_t next_power_of_2 = 1;
    while (next_power_of_2 < (size_t)num_cols)
        next_power_of_2 *= 2;
    int thread_per_block = (int)std::min((size_t)1024, next_power_of_2);
    dim3 block_dim(thread_per_block);
    size_t shared_mem_size = thread_per_block * sizeof(float);

    cuda_rms_norm_kernel<T><<<grid_dim, block_dim, shared_mem_size, stream>>>(
        x, w, out, num_cols, eps, x_row_stride);
}

template void rms_norm_impl<float>(const float *, const float *, float *, int, int, float, size_t,
                                   cudaStream_t);
template void rms_norm_impl<half>(const half *, const half *, half *, int, int, float, size_t,
                                  cudaStream_t);
template void rms_norm_impl<__nv_bfloat16>(const __nv_bfloat16 *, const __nv_bfloat16 *, __nv_bfloat16 *, int,
                                           int, float, size_t, cudaStream_t);

} // namespace chitu
