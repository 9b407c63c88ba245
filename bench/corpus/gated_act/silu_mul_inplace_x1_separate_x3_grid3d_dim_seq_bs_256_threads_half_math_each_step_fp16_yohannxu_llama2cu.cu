// SwiGLU activation in the style of YohannXu/llama2.cu (src/infer_fp.cu, a from-scratch fp16 Llama-2-7B inference
// in plain CUDA: the SiLU and Mul kernels of TransformerBlock.ffn, both launched on ffGrid / ffBlock), fp16:
//   p_ff_x1 = x1 = x @ w1 (the gate) and p_ff_x3 = x3 = x @ w3 (the up projection), two SEPARATE tensors
//   [bs, seq_len, ff_dim]; the result is written IN PLACE into p_ff_x1: x1 = silu(x1) * x3; argument order
//   p_ff_x1, p_ff_x3, seq_len, ff_dim (bs is only the grid's z extent); non-const half pointers
//   the original runs SiLU (in place) then Mul (in place); here they are ONE kernel with every rounding of the
//   two: silu = __hmul(x, __hdiv(1, __hadd(1, half(expf(float(__hneg(x))))))) in half arithmetic (exp computed
//   in float and rounded to half, the sum, the reciprocal and the product each rounded to half), then
//   __hmul(silu, x3) rounded again
//   3-D grid, one thread per element: dim_idx from (blockIdx.x, threadIdx.x), seq_idx = blockIdx.y, bs_idx =
//   blockIdx.z (blockDim.y = blockDim.z = 1), idx = bs_idx * seq_len * ff_dim + seq_idx * ff_dim + dim_idx (int)
//   ffGrid(ff_dim / 256, seq_len, bs), ffBlock(256, 1, 1), the default stream
// Fixed: the original grid is ff_dim / 256 with no bounds check, so the last ff_dim % 256 columns were never
// computed (Llama-2's 11008 happens to divide); the grid is now rounded up and threads past ff_dim return.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

/* kerntune:
args  = ["p_ff_x1: inout f16[bs * seq * ff]", "p_ff_x3: in f16[bs * seq * ff]", "seq_len: i32 = seq",
         "ff_dim: i32 = ff"]
sizes = [{ bs = 1, seq = 4096, ff = 11008 }, { bs = 1, seq = 4, ff = 14336 }, { bs = 3, seq = 7, ff = 2731 }]
grid  = ["cdiv(ff, 256)", "seq", "bs"]
block = 256
*/
__global__ void SiLUMul(half* p_ff_x1, half* p_ff_x3, int seq_len, int ff_dim) {
    int bs_idx = blockIdx.z * blockDim.z + threadIdx.z;
    int seq_idx = blockIdx.y * blockDim.y + threadIdx.y;
    int dim_idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (dim_idx >= ff_dim) {
        return;
    }

    int idx = bs_idx * seq_len * ff_dim + seq_idx * ff_dim + dim_idx;
    // SiLU
    half act = __hmul(p_ff_x1[idx], __hdiv(__float2half(1.0), __hadd(__float2half(1.0), __float2half(expf(__half2float(__hneg(p_ff_x1[idx])))))));
    // Mul
    p_ff_x1[idx] = __hmul(act, p_ff_x3[idx]);
}


// d_ff_x1, d_ff_x3: device [bs, seq_len, ff_dim] half; d_ff_x1 is overwritten with silu(x1) * x3.
void ffn_silu_mul(half* d_ff_x1, half* d_ff_x3, int bs, int seq_len, int ff_dim) {
    dim3 ffGrid((ff_dim + 256 - 1) / 256, seq_len, bs);
    dim3 ffBlock(256, 1, 1);
    SiLUMul<<<ffGrid, ffBlock>>>(d_ff_x1, d_ff_x3, seq_len, ff_dim);
}
