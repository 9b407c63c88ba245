// RMSNorm in the style of infengine (Aryan470/infengine, kernels/rmsnorm.cu: rmsnorm_kern behind the host
// rmsnorm(), a from-scratch fp16 Llama inference engine whose model shape lives in a compile-time config), fp16:
//   d_input, d_output [seq_len, HIDDEN_SIZE], out of place; d_weight [HIDDEN_SIZE]; argument order seq_len,
//   d_input, d_weight, d_output, all non-const half *; the row length is NOT an argument: it is the constexpr
//   InfEngineConfig::HIDDEN_SIZE (2048 here, a Llama-3.2-1B-sized config); EPSILON a file-scope const float 1e-5
//   one block per token (grid seq_len), a fixed 1024 threads striding the hidden dimension, extern __shared__
//   float of one slot per thread (1024 * sizeof(float) from the launcher): a halving tree starting at
//   blockDim.x / 2 with a __syncthreads per step, every thread reads slot 0
//   scaling = rsqrt(sum / HIDDEN_SIZE + EPSILON); the output is __hmul(__float2half(x * scaling), w): the normalized
//   value is ROUNDED TO HALF, then multiplied by the weight in half arithmetic (a second rounding)
//   launched on the default stream (no stream argument), as the original launcher does
// No bug found: the tree needs a power-of-two block, and the launcher always uses 1024.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

struct InfEngineConfig {
    static constexpr int HIDDEN_SIZE = 2048;
};

const float EPSILON = 1e-5;

__device__ float reduce_sum_rms(float my_val, float* reduce_space) {
    const int thread_id = threadIdx.x;
    const int num_threads = blockDim.x;
    reduce_space[thread_id] = my_val;

    __syncthreads();
    for (int delta = num_threads / 2; delta > 0; delta >>= 1) {
        if (thread_id < delta) {
            reduce_space[thread_id] += reduce_space[thread_id + delta];
        }
        __syncthreads();
    }
    return reduce_space[0];
}

/* kerntune:
args  = ["seq_len: i32 = seq_len", "d_input: in f16[seq_len * 2048]", "d_weight: in f16[2048]",
         "d_output: out f16[seq_len * 2048]"]
sizes = [{ seq_len = 16384 }, { seq_len = 4 }, { seq_len = 777 }]
grid  = "seq_len"
block = 1024
smem  = 4096
*/
/*
    Input: [seq_len, hidden_dim]
    Output: [seq_len, hidden_dim]
*/
__global__ void rmsnorm_kern(int seq_len, half* d_input, half* d_weight, half* d_output) {
    // one slot per thread for the block reduction
    extern __shared__ float shmem[];

    // one block per token; the block's threads stride the hidden dimension
    const int block_id = blockIdx.x;
    const int threads_per_block = blockDim.x;
    const int thread_id = threadIdx.x;
    half* my_input = d_input + block_id * InfEngineConfig::HIDDEN_SIZE;
    half* my_output = d_output + block_id * InfEngineConfig::HIDDEN_SIZE;
    // the weight is shared by every token
    half* my_weight = d_weight;

    float my_sum = 0.0;

    for (int i = thread_id; i < InfEngineConfig::HIDDEN_SIZE; i += threads_per_block) {
        float data = __half2float(my_input[i]);
        my_sum += data * data;
    }

    float global_sum = reduce_sum_rms(my_sum, shmem);
    // 1 / sqrt(mean square + eps)
    const float scaling_denom = rsqrt((global_sum / InfEngineConfig::HIDDEN_SIZE) + EPSILON);

    for (int i = thread_id; i < InfEngineConfig::HIDDEN_SIZE; i += threads_per_block) {
        my_output[i] = __hmul(__float2half(__half2float(my_input[i]) * scaling_denom), my_weight[i]);
    }
}

// d_input, d_output: device [seq_len, InfEngineConfig::HIDDEN_SIZE] half; d_weight: device [HIDDEN_SIZE].
__host__ void rmsnorm(int seq_len, __half* d_input, __half* d_weight, __half* d_output) {
    const int num_threads = 1024;
    rmsnorm_kern<<<seq_len, num_threads, num_threads * sizeof(float)>>>(seq_len, d_input, d_weight, d_output);
}
