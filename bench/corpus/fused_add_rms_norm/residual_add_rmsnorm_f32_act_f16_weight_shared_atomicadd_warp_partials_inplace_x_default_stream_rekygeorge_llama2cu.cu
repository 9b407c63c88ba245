// Residual add + RMSNorm in the style of rekygeorge/llama2.cu (llama2_cublas_fp16.cu, a CUDA / cuBLAS port of
// Karpathy's llama2.c run.c: add_kernel and rmsnorm_fp16_kernel behind cuda_rmsnorm_fp16, mixed precision: FP32
// activations on the GPU, FP16 weights), fp32 activations with an fp16 norm weight:
//   the forward pass does x += xb2 (add_kernel, the attention / FFN output added into the residual stream IN
//   PLACE) and then xb = rmsnorm(x, rms_ffn_weight) (or rms_att_weight of the next layer); here the two launches are
//   ONE kernel: x[i] = x[i] + r[i] stored back to x, out[i] = w[i] * (inv * x[i])
//   argument order out, x, then the residual branch r, w (const __half *), size, eps; __restrict__ pointers
//   one block per token row (llama2.c runs one token: the original launches a single block; here the rows of a
//   batch are on grid.x), block = size < 1024 ? 256 : 512 threads striding the row
//   reduction: each warp folds its partial sum of squares by __shfl_down_sync and lane 0 atomicAdds it into ONE
//   __shared__ float (zeroed by thread 0 behind a barrier); thread 0 then overwrites that slot with
//   1.0f / sqrtf(ss / size + eps) (sqrtf and a division, not rsqrtf), every thread reads it after a barrier
//   out = __half2float(w[i]) * (inv * x[i]): the weight widened, the product order of the original
//   eps 1e-5f passed by the launcher; default stream (the original launches without one)
// No bug found: the block is always whole warps, so the full-mask shuffles are defined.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* kerntune:
args  = ["out: out f32[T * dim]", "x: inout f32[T * dim]", "r: in f32[T * dim]", "w: in f16[dim]",
         "size: i32 = dim", "eps: f32 = 1e-5"]
sizes = [{ T = 4096, dim = 4096 }, { T = 4, dim = 4096 }, { T = 17, dim = 999 }]
grid  = "T"
block = "256 if dim < 1024 else 512"
*/
/* Residual add + FP16 RMSNorm: x += r in place, out = w * (x / rms(x)); weight FP16, math FP32 */
__global__ void residual_rmsnorm_fp16_kernel(float* __restrict__ out,
                                             float* __restrict__ x,
                                             const float* __restrict__ r,
                                             const __half* __restrict__ w,
                                             int size, float eps)
{
    /* one token per block */
    out += (size_t)blockIdx.x * size;
    x   += (size_t)blockIdx.x * size;
    r   += (size_t)blockIdx.x * size;

    __shared__ float smem;
    if (threadIdx.x == 0) smem = 0.0f;
    __syncthreads();
    float ss = 0.0f;
    for (int i = threadIdx.x; i < size; i += blockDim.x) {
        float v = x[i] + r[i];   /* add_kernel: a += b */
        x[i] = v;
        ss += v * v;
    }
    /* block reduction */
    for (int offset = warpSize/2; offset > 0; offset >>= 1)
        ss += __shfl_down_sync(0xffffffff, ss, offset);
    if (threadIdx.x % warpSize == 0)
        atomicAdd(&smem, ss);
    __syncthreads();
    if (threadIdx.x == 0) smem = 1.0f / sqrtf(smem / size + eps);
    __syncthreads();
    float inv = smem;
    for (int i = threadIdx.x; i < size; i += blockDim.x)
        out[i] = __half2float(w[i]) * (inv * x[i]);
}

/* d_x: [n_tokens, size] FP32 residual stream (updated in place), d_r: the branch output added to it,
 * d_out: [n_tokens, size] FP32 normalized activations, d_w: [size] FP16 norm weight. */
void cuda_residual_rmsnorm_fp16(float* d_out, float* d_x, const float* d_r,
                                const __half* d_w, int n_tokens, int size)
{
    int block = (size < 1024) ? 256 : 512;
    residual_rmsnorm_fp16_kernel<<<n_tokens, block>>>(d_out, d_x, d_r, d_w, size, 1e-5f);
}
