// Residual add + RMSNorm in the style of qwen600 (yassa9/qwen600, a single-batch CUDA inference engine for
// Qwen3-0.6B: qwen_model.cuh, add_residual_kernel / add_residual_gpu followed by rms_norm_kernel<THREADS_PER_BLOCK>
// / rmsnorm_gpu at every layer boundary: add_residual_gpu(s->x, s->xb2, DIM); rmsnorm_gpu(s->xb, s->x, w, DIM)).
// bf16 storage, fp32 math: x += residual in place, rounded to bf16 once (__float2bfloat16_rn of the fp32 sum, as
// add_residual_kernel stores it), then Y = bf16((x * rsqrt(sum(x^2) * inv_D + EPS)) * w) over the rounded x.
// rms_norm_kernel's style kept: template <int THREADS_PER_BLOCK> with __launch_bounds__, constexpr
// THREADS_PER_BLOCK = 256 at file scope, rows read as __nv_bfloat162 pairs (D / 2 per row, dim % 2 != 0 is fatal
// on the host), __bfloat1622float2 to fp32, cub::BlockReduce<float, THREADS_PER_BLOCK>::Sum, thread 0 writes
// rsqrtf(block_sum * inv_D + EPS) to __shared__ mul_val, inv_D = 1 / dim computed on the host, EPS a compile-time
// constant of config.h (1e-6), size_t D, (x * mul_val) * w then __float22bfloat162_rn; default stream, no stream
// argument (qwen600 launches everything on stream 0). Changes: the two kernels are fused into one (the add loop
// writes x and accumulates the squares of the rounded sums; the scale loop re-reads x); qwen600 decodes one token
// and launches one block (num_blocks = 1) per call, looping on the host over QK-norm heads, so the kernel takes
// blockIdx.x as the row and the host launches n_rows blocks; __ldg stays on the residual and the weight only, since
// x is written in the same launch (the read-only path is not coherent with those writes). Argument order
// (Y, X, residual, weight, D, inv_D). No bug found in the originals. Sizes: 8192 x 4096, 4 x 1024 (Qwen3-0.6B's
// DIM), 999 x 1030 (515 pairs per row, 2 passes of 256 threads plus 3).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <cub/cub.cuh>
#include <cuda_bf16.h>

constexpr int THREADS_PER_BLOCK = 256;
constexpr float EPS = 1e-6f;  // config.h

using bf16 = __nv_bfloat16;

/* kerntune:
args  = ["Y: out bf16[rows * D]", "X: inout bf16[rows * D]", "residual: in bf16[rows * D]", "weight: in bf16[D]",
         "D: u64 = D", "inv_D: f32 = 1.0 / D"]
sizes = [{ rows = 8192, D = 4096 }, { rows = 4, D = 1024 }, { rows = 999, D = 1030 }]
grid  = "rows"
block = 256
template_args = ["256"]
*/
template <int THREADS_PER_BLOCK>
__global__ void __launch_bounds__(THREADS_PER_BLOCK)
add_residual_rms_norm_kernel(
    __nv_bfloat16* __restrict__ Y,
    __nv_bfloat16* __restrict__ X,
    const __nv_bfloat16* __restrict__ residual,
    const __nv_bfloat16* __restrict__ weight,
    size_t D,
    float inv_D)
{
    const int t_idx = threadIdx.x;
    const int vec_iters = D / 2;
    const size_t row = blockIdx.x;

    __nv_bfloat162* row_x = reinterpret_cast<__nv_bfloat162*>(X + row * D);
    const __nv_bfloat162* row_res = reinterpret_cast<const __nv_bfloat162*>(residual + row * D);
    const __nv_bfloat162* weight_in = reinterpret_cast<const __nv_bfloat162*>(weight);
    __nv_bfloat162* row_out = reinterpret_cast<__nv_bfloat162*>(Y + row * D);

    float lsum = 0.0f;

    // add residual (in place on x, one bf16 rounding) and sum the squares of the stored values
    for (int idx = t_idx; idx < vec_iters; idx += THREADS_PER_BLOCK)
    {
        float2 x_fp32 = __bfloat1622float2(row_x[idx]);
        float2 res_fp32 = __bfloat1622float2(__ldg(&row_res[idx]));

        __nv_bfloat162 sum_bf16 = __float22bfloat162_rn(make_float2(x_fp32.x + res_fp32.x, x_fp32.y + res_fp32.y));
        row_x[idx] = sum_bf16;

        float2 v_fp32 = __bfloat1622float2(sum_bf16);
        lsum += v_fp32.x * v_fp32.x + v_fp32.y * v_fp32.y;
    }

    using BlockReduce = cub::BlockReduce<float, THREADS_PER_BLOCK>;
    __shared__ typename BlockReduce::TempStorage tmp;
    float block_sum = BlockReduce(tmp).Sum(lsum);

    __shared__ float mul_val;
    if (t_idx == 0)
    {
        float val = block_sum * inv_D + EPS;
        mul_val = rsqrtf(val);
    }
    __syncthreads();

    for (int idx = t_idx; idx < vec_iters; idx += THREADS_PER_BLOCK)
    {
        __nv_bfloat162 v_in_bf16 = row_x[idx];
        __nv_bfloat162 v_weight_bf16 = __ldg(&weight_in[idx]);
        float2 v_in_fp32 = __bfloat1622float2(v_in_bf16);
        float2 v_weight_fp32 = __bfloat1622float2(v_weight_bf16);

        v_in_fp32.x = (v_in_fp32.x * mul_val) * v_weight_fp32.x;
        v_in_fp32.y = (v_in_fp32.y * mul_val) * v_weight_fp32.y;

        // back to bf16 for storing
        row_out[idx] = __float22bfloat162_rn(v_in_fp32);
    }
}

// o: device [n_rows, dim] normalized output; x: [n_rows, dim] hidden state, updated in place to x + residual;
// residual: [n_rows, dim]; weight: [dim].
void
add_residual_rmsnorm_gpu(
    __nv_bfloat16* o,
    __nv_bfloat16* x,
    const __nv_bfloat16* residual,
    const __nv_bfloat16* weight,
    int dim,
    int n_rows)
{
    if (dim % 2 != 0)
    {
        fprintf(stderr, "FATAL: rmsnorm dim %d is not divisible by 2. Vectorized kernel cannot run.\n", dim);
        exit(EXIT_FAILURE);
    }
    // one block per row; a single block covers typical dimensions up to 8192
    const int num_blocks = n_rows;
    float inv_D = 1.0f / static_cast<float>(dim);

    add_residual_rms_norm_kernel<THREADS_PER_BLOCK><<<num_blocks, THREADS_PER_BLOCK>>>(
        o, x, residual, weight, dim, inv_D);
}
