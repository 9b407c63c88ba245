// Softmax in the style of Darknet (pjreddie/darknet, src/blas_kernels.cu: softmax_device and softmax_kernel behind
// softmax_gpu, the GPU path of its softmax layer), f32:
//   ONE THREAD PER SOFTMAX: the thread id runs over batch * groups; softmax number (b, g) starts at
//   b * batch_offset + g * group_offset and has n values stride apart (the softmax layer's call: batch_offset =
//   inputs, groups, group_offset = n = inputs / groups, stride 1, i.e. contiguous rows of n; the region / YOLO layers
//   use the same kernel with stride = w * h over channels)
//   three serial loops per thread: the max, then e = expf(x / temp - max / temp) written to the output and summed,
//   then output /= sum (a division per value, the output read back); temperature temp, no mask
//   2-D grid from cuda_gridsize(batch * groups): cdiv(batch * groups, BLOCK) blocks in x, folded into
//   x = ceil(sqrt(k)) by y when that passes 65535, id = (blockIdx.x + blockIdx.y * gridDim.x) * blockDim.x +
//   threadIdx.x, #define BLOCK 512,
//   extern "C" launcher on the default stream, int sizes
// Fixed: Darknet read the max loop's value into an int (`int val = input[i*stride]`), truncating it; the "max" was
// then an integer below the true max and expf could overflow for rows of large logits. It is a float here,
// as in AlexeyAB's fork.
// Tolerance: probabilities of rows of 333-1001 values are far below the default absolute tolerance; atol is 1e-6.
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>

#define BLOCK 512

dim3 cuda_gridsize(size_t n) {
    size_t k = (n - 1) / BLOCK + 1;
    size_t x = k;
    size_t y = 1;
    if (x > 65535) {
        x = ceil(sqrt(k));
        y = (n - 1) / (x * BLOCK) + 1;
    }
    dim3 d((unsigned)x, (unsigned)y, 1);
    return d;
}

__device__ void softmax_device(float *input, int n, float temp, int stride, float *output)
{
    int i;
    float sum = 0;
    float largest = -INFINITY;
    for(i = 0; i < n; ++i){
        float val = input[i*stride];
        largest = (val>largest) ? val : largest;
    }
    for(i = 0; i < n; ++i){
        float e = expf(input[i*stride]/temp - largest/temp);
        sum += e;
        output[i*stride] = e;
    }
    for(i = 0; i < n; ++i){
        output[i*stride] /= sum;
    }
}

/* kerntune:
args  = ["input: in f32[batch * groups * n]", "n: i32 = n", "batch: i32 = batch", "batch_offset: i32 = groups * n",
         "groups: i32 = groups", "group_offset: i32 = n", "stride: i32 = 1", "temp: f32 = 1.0",
         "output: out f32[batch * groups * n]"]
sizes = [{ batch = 64, groups = 1024, n = 512 }, { batch = 4, groups = 32, n = 1001 },
         { batch = 3, groups = 77, n = 333 }]
grid  = "cdiv(batch * groups, 512)"
block = 512
atol  = 1e-6
*/
__global__ void softmax_kernel(float *input, int n, int batch, int batch_offset, int groups, int group_offset, int stride, float temp, float *output)
{
    int id = (blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x;
    if (id >= batch*groups) return;
    int b = id / groups;
    int g = id % groups;
    softmax_device(input + b*batch_offset + g*group_offset, n, temp, stride, output + b*batch_offset + g*group_offset);
}

// input, output: device buffers; batch softmaxes of groups groups of n values each (see the kernel comment).
extern "C" void softmax_gpu(float *input, int n, int batch, int batch_offset, int groups, int group_offset, int stride, float temp, float *output)
{
    softmax_kernel<<<cuda_gridsize(batch*groups), BLOCK>>>(input, n, batch, batch_offset, groups, group_offset, stride, temp, output);
}
