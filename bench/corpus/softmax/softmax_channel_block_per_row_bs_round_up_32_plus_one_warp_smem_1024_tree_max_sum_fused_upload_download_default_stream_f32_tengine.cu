// Softmax over the innermost axis as Tengine's CUDA backend writes it (OAID/Tengine,
// source/device/cuda/op/nvgpu_softmax.cu, softmax_gpu_kernel_2 for axis 2 with the softmax_k_upload / softmax_max /
// softmax_exp_sum / softmax_exp_div / softmax_k_download kernels). fp32, out of place: channels = the product of
// the dims before the axis (rows), elem_perchannel = the row length. Block bs = (elem_perchannel / 32 + 1) * 32
// clamped to 1024 (a whole number of warps, one warp more than needed when the row length is a multiple of 32),
// one block per row when the row fits a block (elem_perchannel_match == bs, s == channels), default stream.
// Each thread holds one element: x, or a padding value for threads past the row; a __shared__ float sdata[1024]
// halving tree (s = blockDim / 2, s /= 2, __syncthreads per step) gives the row max, expf(x - max) (0 for padding)
// goes through the same tree for the sum, and the thread divides its value by the sum and stores it.
// Changed: the original runs five launches through a padded global scratch buffer k (cudaMalloc / cudaFree on every
// call) and keeps the per-block max and sum in a global result_block; for rows that fit one block (s == channels)
// these are fused here into one kernel holding the row in registers and shared memory, the scratch buffer dropped.
// Rows longer than 1024, which the original splits over several blocks and merges on the host through
// cudaMemcpy, are rejected. Fixed: the halving tree assumes a power-of-two block, but bs is only a multiple of 32
// (544 for 512 columns), so for bs = 96 the steps 48, 24, 12, 6, 3, 1 never fold element 2 into element 0; the tree
// now starts from the next power of two and skips partners past blockDim. The padding -9999.9f is a finite fake
// minus infinity (rows whose logits are all below it got a max of -9999.9 and an underflowing sum): -FLT_MAX now.
// Row offsets formed in 64 bits. Sizes: 65536 x 512 attention rows (block 544), 4 x 1000 (block 1024),
// 4999 x 777 (block 800). atol 1e-6: the probabilities are ~1 / cols.
#include <cuda_runtime.h>
#include <cfloat>
#include <cstdio>

/* kerntune:
args  = ["x: in f32[rows * cols]", "y: out f32[rows * cols]", "elem_perchannel: i32 = cols"]
sizes = [{ rows = 65536, cols = 512 }, { rows = 4, cols = 1000 }, { rows = 4999, cols = 777 }]
grid  = "rows"
block = "min((cols / 32 + 1) * 32, 1024)"
atol  = 1e-6
*/
__global__ void softmax_channel_kernel(const float* x, float* y, int elem_perchannel)
{
    __shared__ float sdata[1024];
    int tid = threadIdx.x;
    int bs = blockDim.x;
    long long base = (long long)blockIdx.x * elem_perchannel;

    // smallest power of two >= blockDim.x, so that the halving tree covers every slot
    int p2 = 1;
    while (p2 < bs) p2 <<= 1;

    // upload
    float k = (tid < elem_perchannel) ? x[base + tid] : -FLT_MAX;
    sdata[tid] = k;
    __syncthreads();

    // max
    for (int s = p2 / 2; s > 0; s /= 2)
    {
        if (tid < s && tid + s < bs)
        {
            sdata[tid] = max(sdata[tid], sdata[tid + s]);
        }
        __syncthreads();
    }
    float row_max = sdata[0];
    __syncthreads();

    // exp and sum
    if (elem_perchannel <= tid)
        k = 0;
    else
        k = expf(k - row_max);
    sdata[tid] = k;
    __syncthreads();

    for (int s = p2 / 2; s > 0; s /= 2)
    {
        if (tid < s && tid + s < bs)
        {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    float row_sum = sdata[0];

    // divide and download
    if (tid < elem_perchannel)
        y[base + tid] = float(k / row_sum);
}

// axis-2 softmax: x, y [channels, elem_perchannel] on the device. Returns -1 for rows longer than one block.
int softmax_gpu_kernel_2(const float* x, float* y, int channels, int elem_perchannel)
{
    int bs = (elem_perchannel / 32 + 1) * 32;
    if (bs > 1024)
        bs = 1024;
    int elem_perchannel_match = ((elem_perchannel - 1) / bs + 1) * bs;
    int s = elem_perchannel_match * channels / bs;
    if (s != channels)
    {
        fprintf(stderr, "Tengine GPU: softmax rows of %d elements exceed one block\n", elem_perchannel);
        return -1;
    }
    dim3 grid = dim3(s);

    softmax_channel_kernel<<<grid, bs>>>(x, y, elem_perchannel);
    return 0;
}
