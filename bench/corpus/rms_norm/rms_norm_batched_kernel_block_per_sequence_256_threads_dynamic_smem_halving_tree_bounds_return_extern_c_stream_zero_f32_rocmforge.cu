// Batched (prefill) RMSNorm as ROCmForge writes it (oldnordic/ROCmForge, a Rust LLM inference engine for AMD GPUs
// whose kernels are HIP sources loaded through C wrappers: hip_kernels/norm.hip, rms_norm_batched_kernel behind
// extern "C" gpu_rms_norm_batched, next to the single-row rms_norm_kernel used for decode). fp32 throughout:
// x [seq_len, n], weight [n], out [seq_len, n], out = x * rsqrt(sum(x^2) / n + eps) * weight, argument order
// (x, weight, out, n, eps, seq_len). One block per sequence row, blockIdx.x the row, a bounds check that returns
// blocks past seq_len before any barrier (a whole block leaves), size_t row offsets; each thread strides the row by
// blockDim.x summing squares, the partials go to a dynamic extern __shared__ float shared_sq[blockDim.x] and a
// halving tree (step = blockDim.x / 2 .. 1, __syncthreads each step, so the block must be a power of two) leaves the
// sum in shared_sq[0]; every thread computes inv_rms = rsqrt(shared_sq[0] / n + eps) itself and the second pass
// re-reads x from global memory. Host wrapper: block_size = 256, smem_size = block_size * sizeof(float), grid
// seq_len, launched with hipLaunchKernelGGL on stream 0 (the batched wrapper takes no stream and returns
// hipGetLastError()); ported to CUDA as <<<seq_len, block_size, smem_size, 0>>> returning cudaGetLastError(), the
// kernel text unchanged apart from the runtime prefix. No bug found. Sizes: 16384 x 4096, 4 x 2048, 999 x 1001.
#include <cuda_runtime.h>

/* kerntune:
args  = ["x: in f32[seq_len * n]", "weight: in f32[n]", "out: out f32[seq_len * n]", "n: i32 = n",
         "eps: f32 = 1e-6", "seq_len: i32 = seq_len"]
sizes = [{ seq_len = 16384, n = 4096 }, { seq_len = 4, n = 2048 }, { seq_len = 999, n = 1001 }]
grid  = "seq_len"
block = 256
smem  = "256 * 4"
*/
__global__ void rms_norm_batched_kernel(
    const float* __restrict__ x,
    const float* __restrict__ weight,
    float* __restrict__ out,
    const int n,
    const float eps,
    const int seq_len
) {
    extern __shared__ float shared_sq[];

    const int s = blockIdx.x;
    const int tid = threadIdx.x;

    // Bounds check
    if (s >= seq_len) return;

    // Row pointers for this sequence
    const float* row_x = x + (size_t)s * n;
    float* row_out = out + (size_t)s * n;

    // Sum of squares for this row
    float sum_sq = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) {
        float val = row_x[i];
        sum_sq += val * val;
    }
    shared_sq[tid] = sum_sq;
    __syncthreads();

    // Parallel reduction
    for (int step = blockDim.x / 2; step > 0; step >>= 1) {
        if (tid < step) {
            shared_sq[tid] += shared_sq[tid + step];
        }
        __syncthreads();
    }

    // Normalize and scale
    float inv_rms = rsqrt(shared_sq[0] / (float)n + eps);
    for (int i = tid; i < n; i += blockDim.x) {
        row_out[i] = row_x[i] * inv_rms * weight[i];
    }
}

// C wrapper for dynamic linking; d_x, d_out: device [seq_len, n], d_weight: [n].
extern "C" {

cudaError_t gpu_rms_norm_batched(
    const float* d_x,
    const float* d_weight,
    float* d_out,
    const int n,
    const float eps,
    const int seq_len
) {
    const int block_size = 256;
    const int smem_size = block_size * sizeof(float);

    rms_norm_batched_kernel<<<seq_len, block_size, smem_size, 0>>>(
        d_x, d_weight, d_out, n, eps, seq_len
    );

    return cudaGetLastError();
}

} // extern "C"
