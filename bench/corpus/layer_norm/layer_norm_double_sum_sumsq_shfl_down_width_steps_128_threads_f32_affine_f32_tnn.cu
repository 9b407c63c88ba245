// LayerNorm as Tencent's TNN inference framework writes it for its CUDA backend (source/tnn/device/cuda/acc/
// cuda_layer_norm_layer_acc.cu, layer_norm_kernel<THREAD_PER_BLOCK, T> launched by CudaLayerNormLayerAcc::Forward):
// the blob is seen as `channels` rows (the dims before the reduced ones) of `channel_area` elements (the reduced
// dims), one row per block, THREAD_PER_BLOCK = 128 threads as a template parameter and as the loop stride.
// One pass accumulates the sum and the sum of squares in DOUBLE (each element read as float, widened); the warp
// reduction is an unrolled __shfl_down_sync ladder whose width halves at each step (32, 16, 8, 4, 2), warp sums go
// to __shared__ double ssum1 / ssum2 [THREAD_PER_BLOCK / 32], and the 4 warp sums are reduced again by a two-step
// ladder (width 4, 2), which ties the kernel to 128 threads as TNN has it. Thread 0 computes mean = sum1 / size,
// var = sum2 / size - mean^2 and stores 1 / sqrt(var + eps) (double) in __shared__ var; the output loop
// (#pragma unroll(4)) folds the affine into k = scale * rstd and b = bias - mean * k (double math, then float) and
// writes x * k + b. Scale and bias are float whatever T is; argument order (input, output, scale, bias, size,
// batch_size, eps). TNN dispatches float only (T = float here); its Blob / LayerParam plumbing is replaced by raw
// device pointers, the row count and the row size.
// Fixed from TNN: the ladder passed shrinking member masks (0x0000ffff, 0x000000ff, ... with all 32 lanes, and
// 0x0000000f with every thread of the block, calling), which is undefined behaviour for a lane outside the mask;
// the full mask is passed here, with TNN's widths, which gives the same sums in lane 0.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace tnn {

template <typename T>
__device__ __forceinline__ float get_float_value(T value) {
    return static_cast<float>(value);
}
template <>
__device__ __forceinline__ float get_float_value<__half>(__half value) {
    return __half2float(value);
}

template <typename T>
__device__ __forceinline__ T convert_float_value(float value) {
    return static_cast<T>(value);
}
template <>
__device__ __forceinline__ __half convert_float_value<__half>(float value) {
    return __float2half(value);
}

/* kerntune:
args  = ["input: in f32[channels * channel_area]", "output: out f32[channels * channel_area]",
         "scale: in f32[channel_area]", "bias: in f32[channel_area]", "size: i32 = channel_area",
         "batch_size: i32 = channels", "eps: f32 = 1e-5"]
sizes = [{ channels = 16384, channel_area = 4096 }, { channels = 8, channel_area = 5120 },
         { channels = 777, channel_area = 1000 }]
grid  = "channels"
block = 128
template_args = ["128", "float"]
*/
template<int THREAD_PER_BLOCK, typename T>
__global__ void layer_norm_kernel(const T * input, T* output, const float *scale,
        const float *bias, const int size, const int batch_size, const float eps) {
    __shared__ double ssum1[THREAD_PER_BLOCK/32];
    __shared__ double ssum2[THREAD_PER_BLOCK/32];
    __shared__ double mean;
    __shared__ double var;

    const int block_offset = blockIdx.x * size;
    const T *ptr = input + block_offset;
    T *dst = output + block_offset;

    double thread_sum1 = 0.f;
    double thread_sum2 = 0.f;

    for (int i = threadIdx.x; i < size; i+=THREAD_PER_BLOCK) {
        float value = get_float_value<T>(ptr[i]);
        thread_sum1 += value;
        thread_sum2 += value * value;
    }

    thread_sum1 += __shfl_down_sync(0xffffffff, thread_sum1, 16, 32);
    thread_sum1 += __shfl_down_sync(0xffffffff, thread_sum1, 8, 16);
    thread_sum1 += __shfl_down_sync(0xffffffff, thread_sum1, 4, 8);
    thread_sum1 += __shfl_down_sync(0xffffffff, thread_sum1, 2, 4);
    thread_sum1 += __shfl_down_sync(0xffffffff, thread_sum1, 1, 2);

    thread_sum2 += __shfl_down_sync(0xffffffff, thread_sum2, 16, 32);
    thread_sum2 += __shfl_down_sync(0xffffffff, thread_sum2, 8, 16);
    thread_sum2 += __shfl_down_sync(0xffffffff, thread_sum2, 4, 8);
    thread_sum2 += __shfl_down_sync(0xffffffff, thread_sum2, 2, 4);
    thread_sum2 += __shfl_down_sync(0xffffffff, thread_sum2, 1, 2);

    if (threadIdx.x % 32 == 0) {
        ssum1[threadIdx.x / 32] = thread_sum1;
        ssum2[threadIdx.x / 32] = thread_sum2;
    }
    __syncthreads();

    if (threadIdx.x < blockDim.x / 32) {
        thread_sum1 = ssum1[threadIdx.x];
        thread_sum2 = ssum2[threadIdx.x];
    } else {
        thread_sum1 = 0;
        thread_sum2 = 0;
    }
    thread_sum1 += __shfl_down_sync(0xffffffff, thread_sum1, 2, 4);
    thread_sum1 += __shfl_down_sync(0xffffffff, thread_sum1, 1, 2);

    thread_sum2 += __shfl_down_sync(0xffffffff, thread_sum2, 2, 4);
    thread_sum2 += __shfl_down_sync(0xffffffff, thread_sum2, 1, 2);

    if (threadIdx.x == 0) {
        mean = thread_sum1 / size;
        var = (thread_sum2 / size - mean * mean);
        var = 1.0 / sqrt(var + eps);
    }
    __syncthreads();

    #pragma unroll(4)
    for (int i = threadIdx.x; i < size; i += THREAD_PER_BLOCK) {
        float k = scale[i] * var;
        float b = - mean * k + bias[i];
        dst[i] = convert_float_value<T>((get_float_value<T>(ptr[i]) * k + b));
    }
}

// input, output: device pointers to [channels, channel_area]; scale, bias: [channel_area] float.
void LayerNormForward(const float *input, float *output, const float *scale, const float *bias,
                      int channels, int channel_area, float eps, cudaStream_t stream) {
    const int THREAD_PER_BLOCK = 128;
    dim3 griddim;
    griddim.x = channels;

    layer_norm_kernel<THREAD_PER_BLOCK, float><<<griddim, THREAD_PER_BLOCK, 0, stream>>>(input,
        output, scale, bias, channel_area, channels, eps);
}

}  // namespace tnn
