// RMSNorm as fastllm writes it (src/devices/cuda/fastllm-cuda.cu, FastllmRMSNormKernelInner1 and the
// FastllmCudaRMSNorm launcher), the bfloat16 overload: activations in bf16, the weight kept in fp32 as fastllm keeps
// every norm weight, one block per row of `channels`:
//   scale = rsqrtf(sum(x^2) / channels + eps)        y = bf16(x * scale * w)      (fp32 math, one rounding)
// fastllm's conventions: non-const raw pointers (input, weight, output, outer, channels, eps), the block size a
// template parameter THREAD_PER_BLOCK used as the loop stride, chosen by the launcher from the row length
// (64 below 512 channels, 512 below 4096, else 1024); the row pointers moved by `input = input + o * channels`;
// the row read as __nv_bfloat162 pairs (channels must be even: the pair view of an odd-length row would be
// misaligned), with thread 0 taking a last odd element; shuffle-down warp sums into __shared__ warp_sums,
// warp 0 reducing them and lane 0 publishing the scale through a __shared__ float; a second read of the row,
// the weight read with __ldg two floats at a time. fastllm has the same kernel overloaded for float and half rows
// (float4 / half2 views); this file holds the bfloat16 one.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

/* kerntune:
args  = ["input: in bf16[outer * channels]", "weight: in f32[channels]", "output: out bf16[outer * channels]",
         "outer: i32 = outer", "channels: i32 = channels", "eps: f32 = 1e-6"]
sizes = [{ outer = 8192, channels = 4096 }, { outer = 4, channels = 8192 }, { outer = 1001, channels = 5122 }]
grid  = "outer"
block = 1024
template_args = ["1024"]
*/
template <int THREAD_PER_BLOCK>
__global__ void FastllmRMSNormKernelInner1(__nv_bfloat16 *input, float *weight, __nv_bfloat16 *output, int outer, int channels, float eps) {
    int o = blockIdx.x;
    input = input + o * channels;
    output = output + o * channels;

    constexpr int WARP_SIZE = 32;
    constexpr int NUM_WARPS = THREAD_PER_BLOCK / WARP_SIZE;
    __shared__ float warp_sums[NUM_WARPS];
    __shared__ float scale;

    unsigned int tid = threadIdx.x;
    int warp_id = tid / WARP_SIZE;
    int lane_id = tid % WARP_SIZE;

    // 1. sum of squares, two channels per load
    int bf2_channels = channels / 2;
    const __nv_bfloat162 *input_bf2 = reinterpret_cast<const __nv_bfloat162 *>(input);
    float sum2 = 0.0f;
    for (int i = tid; i < bf2_channels; i += THREAD_PER_BLOCK) {
        __nv_bfloat162 v = input_bf2[i];
        float lo = __bfloat162float(v.x);
        float hi = __bfloat162float(v.y);
        sum2 += lo * lo + hi * hi;
    }
    if (channels & 1) {
        if (tid == 0) {
            float x = __bfloat162float(input[channels - 1]);
            sum2 += x * x;
        }
    }

    // 2. warp sums, then warp 0 over the warp sums
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        sum2 += __shfl_down_sync(0xffffffff, sum2, offset);
    }
    if (lane_id == 0) {
        warp_sums[warp_id] = sum2;
    }
    __syncthreads();

    if (warp_id == 0) {
        float val = (lane_id < NUM_WARPS) ? warp_sums[lane_id] : 0.0f;
        for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
            val += __shfl_down_sync(0xffffffff, val, offset);
        }
        if (lane_id == 0) {
            scale = rsqrtf(val / channels + eps);
        }
    }
    __syncthreads();

    // 3. normalize and write, two channels per store
    float s = scale;
    __nv_bfloat162 *output_bf2 = reinterpret_cast<__nv_bfloat162 *>(output);
    for (int i = tid; i < bf2_channels; i += THREAD_PER_BLOCK) {
        __nv_bfloat162 v = input_bf2[i];
        float lo = __bfloat162float(v.x);
        float hi = __bfloat162float(v.y);
        float w0 = __ldg(&weight[i * 2]);
        float w1 = __ldg(&weight[i * 2 + 1]);
        __nv_bfloat162 out_val;
        out_val.x = __float2bfloat16_rn(lo * s * w0);
        out_val.y = __float2bfloat16_rn(hi * s * w1);
        output_bf2[i] = out_val;
    }
    if ((channels & 1) && tid == 0) {
        int last = channels - 1;
        output[last] = __float2bfloat16_rn(__bfloat162float(input[last]) * s * __ldg(&weight[last]));
    }
}

// RMSNorm over the last axis of a bf16 tensor: `outer` rows of `channels`, fp32 weight [channels]; device pointers.
bool FastllmCudaRMSNormBFloat16(__nv_bfloat16 *cudaInput, float *cudaWeight, __nv_bfloat16 *cudaOutput,
                                int outer, int channels, float eps) {
    if (channels < 512) {
        FastllmRMSNormKernelInner1<64> <<< outer, 64 >>>(cudaInput, cudaWeight, cudaOutput, outer, channels, eps);
    } else if (channels < 4096) {
        FastllmRMSNormKernelInner1<512> <<< outer, 512 >>>(cudaInput, cudaWeight, cudaOutput, outer, channels, eps);
    } else {
        FastllmRMSNormKernelInner1<1024> <<< outer, 1024 >>>(cudaInput, cudaWeight, cudaOutput, outer, channels, eps);
    }
    return true;
}
