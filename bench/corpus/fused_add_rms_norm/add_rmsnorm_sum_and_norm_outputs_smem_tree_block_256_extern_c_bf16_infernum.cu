// Fused residual add + RMSNorm as infernum writes it (infernum-rs/infernum, a Rust LLM inference engine whose CUDA
// kernels are plain extern "C" .cu files compiled to PTX and launched through cudarc; infernum/kernels/add_rmsnorm.cu,
// add_rmsnorm_{f32,f16,bf16} behind the Rust add_rmsnorm op), bf16 path:
//   NOT in place: two outputs, sum_out = residual + x (the updated hidden state) and norm_out = rmsnorm(sum) * w;
//   argument order sum_out, norm_out, residual, x, weight, hidden_size, eps
//   one row per block, row pointers from row * hidden_size (int); pass 1 adds in fp32, stores the sum rounded to
//   bf16 and accumulates the fp32 (unrounded) square; block tree reduction in dynamic shared memory (one float per
//   thread, halving strides, __syncthreads per step); every thread reads shared[0]; pass 2 RE-READS the rounded sum
//   from sum_out and writes bf16(sum * rms * weight)
//   launch from the Rust side: grid num_rows, block min(256, hidden_size), shared memory block * 4 bytes
// Fixed: the tree started at blockDim.x / 2, which drops values when the block is not a power of two (any
// hidden_size < 256 that is not one); it now starts at the largest power of two below blockDim.x and guards the
// partner index. The Rust launch configuration is written as a C++ launcher with a stream.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

/* kerntune:
args  = ["sum_out: out bf16[num_rows * hidden_size]", "norm_out: out bf16[num_rows * hidden_size]",
         "residual: in bf16[num_rows * hidden_size]", "x: in bf16[num_rows * hidden_size]",
         "weight: in bf16[hidden_size]", "hidden_size: i32 = hidden_size", "eps: f32 = 1e-6"]
sizes = [{ num_rows = 4096, hidden_size = 4096 }, { num_rows = 4, hidden_size = 4096 },
         { num_rows = 777, hidden_size = 1001 }]
grid  = "num_rows"
block = "min(256, hidden_size)"
smem  = "4 * min(256, hidden_size)"
*/
extern "C" __global__ void add_rmsnorm_bf16(
    __nv_bfloat16* __restrict__ sum_out,
    __nv_bfloat16* __restrict__ norm_out,
    const __nv_bfloat16* __restrict__ residual,
    const __nv_bfloat16* __restrict__ x,
    const __nv_bfloat16* __restrict__ weight,
    const int hidden_size,
    const float eps
) {
    const int row = blockIdx.x;
    const int tid = threadIdx.x;

    const __nv_bfloat16* row_residual = residual + row * hidden_size;
    const __nv_bfloat16* row_x = x + row * hidden_size;
    __nv_bfloat16* row_sum = sum_out + row * hidden_size;
    __nv_bfloat16* row_norm = norm_out + row * hidden_size;

    extern __shared__ float shared[];

    // Pass 1: residual add (stored as the new hidden state) and the sum of squares
    float local_ss = 0.0f;
    for (int i = tid; i < hidden_size; i += blockDim.x) {
        float s = __bfloat162float(row_residual[i]) + __bfloat162float(row_x[i]);
        row_sum[i] = __float2bfloat16(s);
        local_ss += s * s;
    }

    shared[tid] = local_ss;
    __syncthreads();

    // Block tree reduction; starts at the largest power of two below blockDim.x (blocks of min(256, hidden))
    int start = 1;
    while (start * 2 < (int)blockDim.x) {
        start *= 2;
    }
    for (int stride = start; stride > 0; stride >>= 1) {
        if (tid < stride && tid + stride < (int)blockDim.x) {
            shared[tid] += shared[tid + stride];
        }
        __syncthreads();
    }

    float rms = rsqrtf(shared[0] / (float)hidden_size + eps);

    // Pass 2: normalize the stored sum and apply the weight
    for (int i = tid; i < hidden_size; i += blockDim.x) {
        float s = __bfloat162float(row_sum[i]);
        row_norm[i] = __float2bfloat16(s * rms * __bfloat162float(weight[i]));
    }
}

// residual, x: [num_rows, hidden_size]; sum_out, norm_out: [num_rows, hidden_size], freshly allocated by the caller;
// weight: [hidden_size]. Device pointers.
void add_rmsnorm(__nv_bfloat16* sum_out, __nv_bfloat16* norm_out, const __nv_bfloat16* residual,
                 const __nv_bfloat16* x, const __nv_bfloat16* weight, int num_rows, int hidden_size, float eps,
                 cudaStream_t stream) {
    const int block_size = std::min(256, hidden_size);
    const size_t shared_mem = block_size * sizeof(float);
    dim3 grid_dim(num_rows, 1, 1);
    dim3 block_dim(block_size, 1, 1);
    add_rmsnorm_bf16<<<grid_dim, block_dim, shared_mem, stream>>>(sum_out, norm_out, residual, x, weight,
                                                                   hidden_size, eps);
}
