// LayerNorm as tensorrtx writes it for its TensorRT plugins (wang-xinyu/tensorrtx, convnextv2/src/LayerNormPlugin.cu:
// layerNormKernel<T, VPT> behind LayerNormPlugin::enqueue, the channels-last LayerNorm of its ConvNeXt V2 network
// definition), fp16 (`half`; the plugin also instantiates float). One row of hidden_size values per block,
// <<<rows, 256, 0, stream>>> with cub::BlockReduce<float, 256>; each thread loads VPT = 4 CONTIGUOUS values
// (column threadIdx.x * VPT + i) into a float register array, zero past hidden_size; mean = BlockReduce Sum / hidden
// published by thread 0 in a __shared__ float, a second BlockReduce over (v - mean)^2 from the registers (two-pass
// variance, no re-read of x) with the same TempStorage after the barrier, thread 0 stores inv_std = rsqrtf(var + eps)
// in a second __shared__ float; y = T((v - mean) * inv_std * gamma + beta) with gamma / beta read as T and widened,
// one rounding at the store. Argument order (input, gamma, beta, output, hidden_size, eps), eps a float plugin field
// (default 1e-6); the plugin's unused epsilon<T>() helper is left out.
// Fixed: the kernel covers only 256 * VPT = 1024 columns ("supports hidden_size up to 1024") and enqueue always
// launched VPT = 4, so wider rows (ConvNeXt V2-H reaches 2816 channels) were normalized over their first 1024 values
// and left their other columns unwritten: enqueue now picks VPT = 4 / 8 / 12 / 16 by hidden_size (the launcher
// returns an error status past 4096). Every size set here has hidden_size <= 1024 (VPT = 4, the spec's <half, 4>).
// The TensorRT plugin class is reduced to its enqueue body as a free function over device pointers and a stream.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/cub.cuh>

/* kerntune:
args  = ["input: in f16[rows * hidden_size]", "gamma: in f16[hidden_size]", "beta: in f16[hidden_size]",
         "output: out f16[rows * hidden_size]", "hidden_size: i32 = hidden_size", "eps: f32 = 1e-6"]
sizes = [{ rows = 65536, hidden_size = 1024 }, { rows = 4, hidden_size = 768 }, { rows = 999, hidden_size = 1001 }]
grid  = "rows"
block = 256
template_args = ["half", "4"]
*/
template <typename T, int VPT>
__global__ void layerNormKernel(const T* __restrict__ input, const T* __restrict__ gamma, const T* __restrict__ beta,
                                T* __restrict__ output, int hidden_size, float eps) {
    // one block per instance (a row of hidden_size values)
    const int row_offset = blockIdx.x * hidden_size;

    float vals[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int col = threadIdx.x * VPT + i;
        vals[i] = col < hidden_size ? (float)input[row_offset + col] : 0.0f;
    }

    // mean
    float local = 0.0f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        if (threadIdx.x * VPT + i < hidden_size) local += vals[i];
    }

    using BlockReduce = cub::BlockReduce<float, 256>;
    __shared__ typename BlockReduce::TempStorage temp_storage;
    __shared__ float mean;
    __shared__ float inv_std;

    const float total = BlockReduce(temp_storage).Sum(local);
    if (threadIdx.x == 0) mean = total / hidden_size;
    __syncthreads();

    // variance from the registers
    float local_sq = 0.0f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        if (threadIdx.x * VPT + i < hidden_size) {
            const float d = vals[i] - mean;
            local_sq += d * d;
        }
    }
    const float total_sq = BlockReduce(temp_storage).Sum(local_sq);
    if (threadIdx.x == 0) inv_std = rsqrtf(total_sq / hidden_size + eps);
    __syncthreads();

    // normalize, scale, shift
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int col = threadIdx.x * VPT + i;
        if (col < hidden_size) {
            const float n = (vals[i] - mean) * inv_std;
            output[row_offset + col] = (T)(n * (float)gamma[col] + (float)beta[col]);
        }
    }
}

// The body of LayerNormPlugin::enqueue for a kHALF input: input / output [rows, hidden_size], gamma / beta
// [hidden_size], all device fp16. Returns 0 on success, 1 when hidden_size is wider than the kernel can hold.
int layerNormEnqueue(const half* input, const half* gamma, const half* beta, half* output, int rows, int hidden_size,
                     float epsilon, cudaStream_t stream) {
    if (hidden_size <= 1024) {
        layerNormKernel<half, 4><<<rows, 256, 0, stream>>>(input, gamma, beta, output, hidden_size, epsilon);
    } else if (hidden_size <= 2048) {
        layerNormKernel<half, 8><<<rows, 256, 0, stream>>>(input, gamma, beta, output, hidden_size, epsilon);
    } else if (hidden_size <= 3072) {
        layerNormKernel<half, 12><<<rows, 256, 0, stream>>>(input, gamma, beta, output, hidden_size, epsilon);
    } else if (hidden_size <= 4096) {
        layerNormKernel<half, 16><<<rows, 256, 0, stream>>>(input, gamma, beta, output, hidden_size, epsilon);
    } else {
        return 1;
    }
    return 0;
}
