// Decode-time attention softmax as ankan-ban's llama_cu_awq writes it (gpu_kernels.h softmax_kernel_no_smem, launched
// from MultiHeadAttention in llama2_q4.cu; a CUDA port of llama2.c with AWQ int4 weights), fp16, in place:
//   att: fp16 scores of ONE decode step, [num_heads, pos + 1] PACKED by the current length (the QK^T kernel writes
//        head h's scores at h * (pos + 1)), the scale 1 / sqrt(head_size) already applied by the QK^T mat-vec
//   size = *pPos + 1 read ON THE DEVICE from an int the sampler kernel increments (the whole token loop runs in a CUDA
//        graph, so no length reaches the host); causal by construction (only positions 0..pos exist)
//   att[h, t] = half(exp(x - max) / sum) with the max, the exponentials and the sum in float
// llama_cu_awq's conventions: one block per head (grid = num_heads) of a hard-coded 1024 threads (cub::BlockReduce<float,
// 1024> fixes it), cub reductions (a max functor, Sum) broadcast through a __shared__ float written by thread 0,
// the max seeded with 0 for threads past the row (tid < size ? x : 0: harmless, the softmax is shift invariant), three
// passes over global memory: the max, then exp written back to att as half (rounded) and summed in float, then the
// rounded exponentials re-read and divided by the sum; expf; a global cudaStream_t; the host picks the shared-memory
// kernel (scores staged in a static 8192-float __shared__ array) when the model's max_seq_len fits and this no-smem
// kernel otherwise: the size sets are long-context (max_seq_len > 8192), so the no-smem kernel is the one launched.
// llama_cu_awq passes cub::Max(), which CCCL 3 removed; its replacement cuda::maximum<>{} is written instead.
// The scores buffer is declared for the current length (num_heads * size); pPos ~ randint(size - 1, size) holds pos.
// atol 1e-6: probabilities of ~1 / size are far below the f16 default absolute tolerance.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/cub.cuh>
#include <cuda/functional>

#define MAX_SEQ_LEN_SMEM_KERNEL 8192  // 8k is the max sequence length supported by the kernel that uses shared memory

cudaStream_t stream;

__global__ void softmax_kernel(half* __restrict__ arr, int num_heads, int* pPos) {
    __shared__ float att[MAX_SEQ_LEN_SMEM_KERNEL];
    int h = blockIdx.x;
    int tid = threadIdx.x;
    int step = blockDim.x;
    int size = *pPos + 1;

    // stage the row in shared memory
    for (int t = tid; t < size; t += step)
        att[t] = (float)arr[h * size + t];
    __syncthreads();

    using BlockReduce = cub::BlockReduce<float, 1024>;
    __shared__ typename BlockReduce::TempStorage temp;
    __shared__ float shared_val;

    // max value (for numerical stability)
    float max_val = tid < size ? att[tid] : 0;
    for (int i = tid + step; i < size; i += step)
        if (att[i] > max_val)
            max_val = att[i];

    max_val = BlockReduce(temp).Reduce(max_val, cuda::maximum<>{});
    if (threadIdx.x == 0)
        shared_val = max_val;
    __syncthreads();
    max_val = shared_val;

    // exp and sum
    float sum = 0.0f;
    for (int i = tid; i < size; i += step) {
        att[i] = expf(att[i] - max_val);
        sum += att[i];
    }

    sum = BlockReduce(temp).Sum(sum);
    if (threadIdx.x == 0)
        shared_val = sum;
    __syncthreads();
    sum = shared_val;

    // normalize and write back
    for (int t = tid; t < size; t += step)
        arr[h * size + t] = (half)(att[t] / sum);
}

/* kerntune:
args  = ["arr: inout f16[num_heads * size]", "num_heads: i32 = num_heads",
         "pPos: in i32[1] ~ randint(size - 1, size)"]
sizes = [{ num_heads = 64, size = 262144, max_seq_len = 262144 },
         { num_heads = 32, size = 12288, max_seq_len = 16384 },
         { num_heads = 40, size = 10001, max_seq_len = 32768 }]
grid  = "num_heads"
block = 1024
atol  = 1e-6
*/
__global__ void softmax_kernel_no_smem(half* arr, int num_heads, int* pPos) {
    int h = blockIdx.x;
    int tid = threadIdx.x;
    int step = blockDim.x;
    int size = *pPos + 1;

    using BlockReduce = cub::BlockReduce<float, 1024>;
    __shared__ typename BlockReduce::TempStorage temp;
    __shared__ float shared_val;

    // max value (for numerical stability)
    float max_val = tid < size ? (float)arr[h * size + tid] : 0;
    for (int i = tid + step; i < size; i += step) {
        float val = (float)arr[h * size + i];
        if (val > max_val)
            max_val = val;
    }

    max_val = BlockReduce(temp).Reduce(max_val, cuda::maximum<>{});
    if (threadIdx.x == 0)
        shared_val = max_val;
    __syncthreads();
    max_val = shared_val;

    // exp and sum; the exponentials go back to the scores buffer as half
    float sum = 0.0f;
    for (int i = tid; i < size; i += step) {
        float val = (float)arr[h * size + i];
        val = expf(val - max_val);
        arr[h * size + i] = (half)val;
        sum += val;
    }

    sum = BlockReduce(temp).Sum(sum);
    if (threadIdx.x == 0)
        shared_val = sum;
    __syncthreads();
    sum = shared_val;

    // normalize and write the result
    for (int t = tid; t < size; t += step)
        arr[h * size + t] = (half)(float(arr[h * size + t]) / sum);
}

// Step 2 of MultiHeadAttention: att [num_heads, *pPos + 1] half on the device, pPos a device int; max_seq_len is the
// model's context length (Config::seq_len), which decides the kernel, not the current position.
void attention_softmax(half* att, int num_heads, int max_seq_len, int* pPos) {
    if (max_seq_len <= MAX_SEQ_LEN_SMEM_KERNEL)
        softmax_kernel <<< num_heads, 1024, 0, stream >>> (att, num_heads, pPos);
    else
        softmax_kernel_no_smem <<< num_heads, 1024, 0, stream >>> (att, num_heads, pPos);
}
