// Fused residual add + RMSNorm as PyGPUkit writes it (m96-chan/PyGPUkit, native/ops/nn/fused_kernels.cuh
// rmsnorm_residual_bf16_kernel, dispatched by rmsnorm_residual in native/ops/nn/fused/fused.inl; a Python GPU toolkit
// whose C++/CUDA core runs Qwen / Llama-style models): bf16 everywhere (input, residual, gamma, output), fp32 math.
//   y[row] = bf16( (x + r) * rsqrt(mean((x + r)^2) + eps) * gamma )
// OUT OF PLACE with ONE output: the sum x + r is formed in fp32 and never stored (neither rounded to bf16 nor written
// back to the residual stream); pass 2 re-reads input and residual from global memory and recomputes it.
// Conventions kept: namespace pygpukit::ops::nn, argument order (input, residual, gamma, output, batch_size, features,
// eps) with size_t sizes, one block per row (grid = batch_size, the row bound checked before anything else), a fixed
// 256-thread block striding over the features, warp sums by __shfl_down_sync over warpSize / 2 .. 1, lane 0 of each
// warp to a __shared__ float[32], the first warp folds the warp sums, thread 0 writes a __shared__ inv_rms =
// rsqrtf(sum / features + eps), one rounding at the store. The dispatcher's GPUArray checks and dtype switch became a
// plain C++ launcher with device pointers and a stream (PyGPUkit takes its capture stream from internal state).
// No race or bug found. Sizes: 8192 x 4096, decode 4 x 4096, tail 999 x 3001.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstddef>

namespace pygpukit {
namespace ops {
namespace nn {

/* kerntune:
args  = ["input: in bf16[batch * features]", "residual: in bf16[batch * features]", "gamma: in bf16[features]",
         "output: out bf16[batch * features]", "batch_size: u64 = batch", "features: u64 = features",
         "eps: f32 = 1e-6"]
sizes = [{ batch = 8192, features = 4096 }, { batch = 4, features = 4096 }, { batch = 999, features = 3001 }]
grid  = "batch"
block = 256
*/
__global__ void rmsnorm_residual_bf16_kernel(
    const __nv_bfloat16* __restrict__ input,     // [batch, features]
    const __nv_bfloat16* __restrict__ residual,  // [batch, features]
    const __nv_bfloat16* __restrict__ gamma,     // [features]
    __nv_bfloat16* __restrict__ output,          // [batch, features]
    size_t batch_size,
    size_t features,
    float eps
) {
    int row = blockIdx.x;
    if (row >= batch_size) return;

    const __nv_bfloat16* in_row = input + row * features;
    const __nv_bfloat16* res_row = residual + row * features;
    __nv_bfloat16* out_row = output + row * features;

    // Phase 1: sum of squares of z = x + residual (fp32, z not stored)
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < features; i += blockDim.x) {
        float z = __bfloat162float(in_row[i]) + __bfloat162float(res_row[i]);
        sum_sq += z * z;
    }

    // reduce inside each warp
    for (int offset = warpSize / 2; offset > 0; offset /= 2) {
        sum_sq += __shfl_down_sync(0xffffffff, sum_sq, offset);
    }

    // one partial per warp, folded by the first warp
    __shared__ float warp_sums[32];
    int lane = threadIdx.x % warpSize;
    int warp = threadIdx.x / warpSize;
    if (lane == 0) {
        warp_sums[warp] = sum_sq;
    }
    __syncthreads();

    if (warp == 0) {
        int num_warps = (blockDim.x + warpSize - 1) / warpSize;
        sum_sq = (threadIdx.x < num_warps) ? warp_sums[threadIdx.x] : 0.0f;
        for (int offset = warpSize / 2; offset > 0; offset /= 2) {
            sum_sq += __shfl_down_sync(0xffffffff, sum_sq, offset);
        }
    }

    __shared__ float inv_rms;
    if (threadIdx.x == 0) {
        inv_rms = rsqrtf(sum_sq / features + eps);
    }
    __syncthreads();

    // Phase 2: re-read x and residual, normalize, scale by gamma
    for (int i = threadIdx.x; i < features; i += blockDim.x) {
        float z = __bfloat162float(in_row[i]) + __bfloat162float(res_row[i]);
        float g = __bfloat162float(gamma[i]);
        out_row[i] = __float2bfloat16(z * inv_rms * g);
    }
}

}  // namespace nn

// y = rmsnorm(input + residual) * gamma, [batch_size, features] bf16
void rmsnorm_residual_bf16(const __nv_bfloat16* input, const __nv_bfloat16* residual, const __nv_bfloat16* gamma,
                           __nv_bfloat16* output, size_t batch_size, size_t features, float eps,
                           cudaStream_t stream) {
    // One block per row
    const int block_size = 256;
    const int grid_size = static_cast<int>(batch_size);
    nn::rmsnorm_residual_bf16_kernel<<<grid_size, block_size, 0, stream>>>(input, residual, gamma, output,
                                                                           batch_size, features, eps);
}

}  // namespace ops
}  // namespace pygpukit
