// Fused residual add + RMSNorm in the style of EdgeLLM (its residual-add CUDA kernels: residual_add_rmsnorm_kernel
// behind the extern "C" residual_add_rmsnorm_f32, used after attention and after the FFN of a pre-norm
// transformer), fp32:
//   x, residual [batch_size, hidden_dim]; output [batch_size, hidden_dim] = rmsnorm(x + residual) * weight, OUT OF
//   PLACE; residual_out [batch_size, hidden_dim] (optional, nullptr to skip) receives the sum x + residual for the
//   next layer's residual stream; x and residual are only read
//   rms = sqrtf(sum / hidden_dim + eps), scale = 1.0f / rms (a sqrt then a division, not rsqrtf); the sum is
//   RECOMPUTED from x and residual in the second pass instead of being re-read from residual_out
//   launch: one row per block, 256 threads striding the row, early return past batch_size; warp sums by
//   __shfl_down_sync into extern __shared__ float[num_warps] (dynamic smem = 256 / 32 floats), the first warp
//   reduces them, thread 0 writes the scale to a static __shared__ float; int offsets; argument order (output,
//   residual_out, x, residual, weight, batch_size, hidden_dim, eps); CUDA_CHECK returning -1
// EdgeLLM's launcher switches to a float4 kernel when hidden_dim >= 256 and hidden_dim % 4 == 0, and that kernel
// takes no residual_out argument, so the sum the caller asked for was silently never written for most model sizes
// (a real bug); the float4 kernel is left out and this launcher always launches the scalar kernel, which honours
// residual_out. CUDA_CHECK prints the error code instead of calling cudaGetErrorString.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cmath>

#define CUDA_CHECK(call) do { \
    cudaError_t err = call; \
    if (err != cudaSuccess) { \
        fprintf(stderr, "CUDA error at %s:%d: %d\n", __FILE__, __LINE__, (int)err); \
        return -1; \
    } \
} while(0)

#define WARP_SIZE 32

/* kerntune:
args  = ["output: out f32[B * N]", "residual_out: out f32[B * N]", "x: in f32[B * N]", "residual: in f32[B * N]",
         "weight: in f32[N]", "batch_size: i32 = B", "hidden_dim: i32 = N", "eps: f32 = 1e-6"]
sizes = [{ B = 8192, N = 4096 }, { B = 4, N = 2048 }, { B = 999, N = 1001 }]
grid  = "B"
block = 256
smem  = 32
*/
__global__ void residual_add_rmsnorm_kernel(
    float* __restrict__ output,
    float* __restrict__ residual_out,  // Optional: save x + residual
    const float* __restrict__ x,
    const float* __restrict__ residual,
    const float* __restrict__ weight,
    int batch_size,
    int hidden_dim,
    float eps
) {
    extern __shared__ float shared[];
    float* s_sum_sq = shared;

    int batch_idx = blockIdx.x;
    int tid = threadIdx.x;

    if (batch_idx >= batch_size) return;

    const float* x_row = x + batch_idx * hidden_dim;
    const float* r_row = residual + batch_idx * hidden_dim;
    float* out_row = output + batch_idx * hidden_dim;

    // Pass 1: the sum, saved if asked for, and its sum of squares
    float local_sum_sq = 0.0f;

    for (int i = tid; i < hidden_dim; i += blockDim.x) {
        float val = x_row[i] + r_row[i];

        if (residual_out != nullptr) {
            residual_out[batch_idx * hidden_dim + i] = val;
        }

        local_sum_sq += val * val;
    }

    // Warp-level reduction
    #pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        local_sum_sq += __shfl_down_sync(0xffffffff, local_sum_sq, offset);
    }

    int warp_id = tid / WARP_SIZE;
    int lane_id = tid % WARP_SIZE;
    int num_warps = blockDim.x / WARP_SIZE;

    if (lane_id == 0) {
        s_sum_sq[warp_id] = local_sum_sq;
    }
    __syncthreads();

    // Final reduction in the first warp
    if (tid < num_warps) {
        local_sum_sq = s_sum_sq[tid];
    } else {
        local_sum_sq = 0.0f;
    }

    if (tid < WARP_SIZE) {
        #pragma unroll
        for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
            local_sum_sq += __shfl_down_sync(0xffffffff, local_sum_sq, offset);
        }
    }

    // Broadcast the RMS scale
    __shared__ float s_rms_scale;
    if (tid == 0) {
        float rms = sqrtf(local_sum_sq / hidden_dim + eps);
        s_rms_scale = 1.0f / rms;
    }
    __syncthreads();

    float rms_scale = s_rms_scale;

    // Pass 2: normalize, recomputing the sum
    for (int i = tid; i < hidden_dim; i += blockDim.x) {
        float val = x_row[i] + r_row[i];
        out_row[i] = val * rms_scale * weight[i];
    }
}

extern "C" {

/**
 * Fused residual add + RMSNorm: output = rmsnorm(x + residual, weight, eps)
 * residual_out: optional, receives x + residual (NULL to skip). Device pointers, [batch_size, hidden_dim].
 */
int residual_add_rmsnorm_f32(
    float* output,
    float* residual_out,
    const float* x,
    const float* residual,
    const float* weight,
    int batch_size,
    int hidden_dim,
    float eps,
    cudaStream_t stream
) {
    int block = 256;
    int num_warps = block / WARP_SIZE;
    int smem_size = num_warps * sizeof(float);

    residual_add_rmsnorm_kernel<<<batch_size, block, smem_size, stream>>>(
        output, residual_out, x, residual, weight, batch_size, hidden_dim, eps
    );

    CUDA_CHECK(cudaGetLastError());
    return 0;
}

}  // extern "C"
