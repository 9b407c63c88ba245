// LayerNorm (fp16) in the style of Inferflow (Tencent AI Lab; src/kernels/unary_tensor_opr.h:
// Tensor_StdNorm_Kernel<SourceType, TargetType> behind TensorOpr::StdNorm, the "STD" branch of
// TensorOpr::LayerNormalization used for the pre-attention / pre-FFN norms of LayerNorm models):
//   argument order rows, cols, S (source), T (target), eps, rows_mul, M (multiplier = weight), rows_add, A (adder =
//   bias); M and A are tensors of rows_mul / rows_add rows, row (row % rows_mul) applies (1 here: one weight row)
//   grid (1, rows), block (128, 1): one row per block on blockIdx.y, the row taken as threadIdx.y + blockIdx.y *
//   blockDim.y; each thread strides over the row summing x and x^2 (each element cast to double first, the sums kept
//   in float), writes them into __shared__ float sum_cache / sum2_cache [Inferflow_MaxThreadPerBlock = 256];
//   after a __syncthreads THREAD 0 ALONE adds the 128 partials serially, mean = sum / cols,
//   var = sum2 / cols - mean^2, scale = rsqrtf(var + eps), stored back in sum_cache[0] / sum2_cache[0]; a
//   __syncthreads, then y = (x - mean) * scale * M + A in float, one rounding to the target type
//   eps 1e-5 fixed by the host; launched on the default stream (Inferflow synchronizes after each op; dropped)
// No bug found (the barriers sit inside "if (row < rows)", which the whole block takes together since block.y = 1).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>

#define Inferflow_MaxThreadPerBlock 256

namespace inferflow
{

/* kerntune:
args  = ["rows: i32 = rows", "cols: i32 = cols", "S: in f16[rows * cols]", "T: out f16[rows * cols]",
         "eps: f32 = 1e-5", "rows_mul: i32 = 1", "M: in f16[cols]", "rows_add: i32 = 1", "A: in f16[cols]"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 4, cols = 5120 }, { rows = 1001, cols = 2999 }]
grid  = [1, "rows"]
block = [128, 1]
template_args = ["half", "half"]
*/
template <typename SourceType, typename TargetType>
__global__ void Tensor_StdNorm_Kernel(int rows, int cols, SourceType const *S, TargetType *T,
    float eps, int rows_mul = 0, SourceType const *M = nullptr,
    int rows_add = 0, SourceType const *A = nullptr)
{
    int tid = threadIdx.x;
    int row = threadIdx.y + blockIdx.y * blockDim.y;

    const int block_size = blockDim.x;

    const int cache_len = Inferflow_MaxThreadPerBlock;
    __shared__ float sum_cache[cache_len];
    __shared__ float sum2_cache[cache_len];

    if (row < rows)
    {
        float sum = 0.0f, sum2 = 0.0f;
        const SourceType *src_row = S + row * cols;

#       pragma unroll
        for (int xi = tid; xi < cols; xi += block_size)
        {
            const double v = (double)(float)src_row[xi];
            sum += v;
            sum2 += v * v;
        }

        sum_cache[tid] = sum;
        sum2_cache[tid] = sum2;

        __syncthreads();

        sum = 0.0f;
        sum2 = 0.0f;
        if (tid == 0)
        {
#           pragma unroll
            for (int idx = 0; idx < blockDim.x; idx++)
            {
                sum += sum_cache[idx];
                sum2 += sum2_cache[idx];
            }

            float mean = (float)(sum / cols);
            float var_value = (float)(sum2 / cols - mean * mean);
            float scale = rsqrtf(var_value + eps);
            sum_cache[0] = mean;
            sum2_cache[0] = scale;
        }

        __syncthreads();

        float mean = sum_cache[0];
        float scale = sum2_cache[0];
        TargetType *target_row = T + row * cols;

#       pragma unroll
        for (int xi = tid; xi < cols; xi += block_size)
        {
            float v = ((float)src_row[xi] - mean) * scale;
            if (M != nullptr && A != nullptr)
            {
                v = v * (float)M[(row % rows_mul) * cols + xi]
                    + (float)A[(row % rows_add) * cols + xi];
            }
            else if (M != nullptr)
            {
                v = v * (float)M[(row % rows_mul) * cols + xi];
            }

            target_row[xi] = (TargetType)v;
        }
    }
}

// T, S: device [rows, cols] half; M (weight) and A (bias): [rows_mul, cols] / [rows_add, cols], here one row each
bool StdNorm(half *T, const half *S, int rows, int cols, const half *M, int rows_mul, const half *A, int rows_add)
{
    const float eps = 1e-5f;

    int thread_per_block = std::min(128, Inferflow_MaxThreadPerBlock);
    int thread_per_row = thread_per_block;
    dim3 block(thread_per_row, 1);
    dim3 grid(1, (rows + block.y - 1) / block.y);

    Tensor_StdNorm_Kernel<half, half><<<grid, block>>>(rows, cols, S, T, eps,
        rows_mul, M, rows_add, A);
    return true;
}

} //end of namespace
