// Column-wise softmax in the style of Microsoft CNTK (Source/Math/GPUMatrixCUDAKernels.cuh:
// _assignColumnwiseSoftmaxOf behind GPUMatrix<ElemType>::AssignSoftmaxOf(a, isColWise = true), the softmax of
// CNTK's Softmax node and of the classification output layer), ElemType = float:
//   CNTK matrices are COLUMN-MAJOR, one sample per column: a, us are [numRows = classes, numCols = samples],
//   element (i, j) at IDX2C(i, j, numRows) = j * numRows + i, so each softmax runs down one contiguous column
//   argument order a, us, m_numCols, m_numRows; out of place
//   ONE BLOCK PER COLUMN of exactly MAX_THREADS_PER_BLOCK = 512 threads (the kernel's unrolled tree assumes it),
//   each thread strides the column by 512; reductions in a __shared__ partials[512] array folded by an
//   UNROLLED halving tree (256, 128, ..., 4, one __syncthreads() per step) and thread 0 combining the last four
//   max seeded with -10000000 (CNTK's constant; only wrong for a column entirely below -1e7)
//   pass 1: max; pass 2: us = a - max written out, partials += expf(a - max); thread 0 turns the sum into its
//   LOG; pass 3: us = expf(us - log(sum)) (exp of the shifted value minus the log-sum, not a division),
//   sizeof(ElemType) == sizeof(float) selects expf / logf over exp / log
//   launched <<<numCols, 512, 0, t_stream>>> as GPUMatrix does
// Fixed: thread 0 read partials[1..3] to form the column max while threads 1..3 were already zeroing their
// partials for the sum pass (no barrier between the two): a __syncthreads() now separates them.
// atol 1e-6: outputs are probabilities of ~1 / rows, far below the default absolute tolerance.
#include <cuda_runtime.h>

#define MAX_THREADS_PER_BLOCK 512
#define IDX2C(i, j, ld) (((j) * (ld)) + (i))  // 0 based indexing, column-major

typedef int CUDA_LONG;

namespace Microsoft { namespace MSR { namespace CNTK {

// each block processes one column. There must be 512 threads in a block
/* kerntune:
args  = ["a: in f32[rows * cols]", "us: out f32[rows * cols]", "m_numCols: i32 = cols", "m_numRows: i32 = rows"]
sizes = [{ rows = 32000, cols = 1024 }, { rows = 32000, cols = 4 }, { rows = 1001, cols = 999 }]
grid  = "cols"
block = 512
atol  = 1e-6
template_args = ["float"]
*/
template <class ElemType>
__global__ void _assignColumnwiseSoftmaxOf(
    const ElemType* a,
    ElemType* us,
    const CUDA_LONG m_numCols,
    const CUDA_LONG m_numRows)
{
    // We first find max per column
    __shared__ ElemType colMax[1];
    __shared__ ElemType partials[MAX_THREADS_PER_BLOCK];
    colMax[0] = -10000000;
    partials[threadIdx.x] = -10000000;

    for (int i = threadIdx.x; i < m_numRows; i += MAX_THREADS_PER_BLOCK)
    {
        partials[threadIdx.x] = max(partials[threadIdx.x], a[IDX2C(i, blockIdx.x, m_numRows)]);
    }
    __syncthreads();

    if (threadIdx.x < 256)
    {
        partials[threadIdx.x] = max(partials[threadIdx.x + 256], partials[threadIdx.x]);
    }
    __syncthreads();

    if (threadIdx.x < 128)
    {
        partials[threadIdx.x] = max(partials[threadIdx.x + 128], partials[threadIdx.x]);
    }
    __syncthreads();

    if (threadIdx.x < 64)
    {
        partials[threadIdx.x] = max(partials[threadIdx.x + 64], partials[threadIdx.x]);
    }
    __syncthreads();

    if (threadIdx.x < 32)
    {
        partials[threadIdx.x] = max(partials[threadIdx.x + 32], partials[threadIdx.x]);
    }
    __syncthreads();

    if (threadIdx.x < 16)
    {
        partials[threadIdx.x] = max(partials[threadIdx.x + 16], partials[threadIdx.x]);
    }
    __syncthreads();

    if (threadIdx.x < 8)
    {
        partials[threadIdx.x] = max(partials[threadIdx.x + 8], partials[threadIdx.x]);
    }
    __syncthreads();

    if (threadIdx.x < 4)
    {
        partials[threadIdx.x] = max(partials[threadIdx.x + 4], partials[threadIdx.x]);
    }
    __syncthreads();

    if (threadIdx.x == 0)
    {
        colMax[0] = max(max(partials[0], partials[1]), max(partials[2], partials[3]));
    }
    __syncthreads(); // thread 0 has read partials[0..3] before they are reset
    partials[threadIdx.x] = 0.0f;
    __syncthreads();

    // Now start finding sums
    __shared__ ElemType colSum[1];
    for (int i = threadIdx.x; i < m_numRows; i += MAX_THREADS_PER_BLOCK)
    {
        ElemType tmp = a[IDX2C(i, blockIdx.x, m_numRows)] - colMax[0];
        us[IDX2C(i, blockIdx.x, m_numRows)] = tmp;
        partials[threadIdx.x] += (sizeof(ElemType) == sizeof(float)) ? expf(tmp) : exp(tmp);
    }
    __syncthreads();

    if (threadIdx.x < 256)
    {
        partials[threadIdx.x] += partials[threadIdx.x + 256];
    }
    __syncthreads();

    if (threadIdx.x < 128)
    {
        partials[threadIdx.x] += partials[threadIdx.x + 128];
    }
    __syncthreads();

    if (threadIdx.x < 64)
    {
        partials[threadIdx.x] += partials[threadIdx.x + 64];
    }
    __syncthreads();

    if (threadIdx.x < 32)
    {
        partials[threadIdx.x] += partials[threadIdx.x + 32];
    }
    __syncthreads();

    if (threadIdx.x < 16)
    {
        partials[threadIdx.x] += partials[threadIdx.x + 16];
    }
    __syncthreads();

    if (threadIdx.x < 8)
    {
        partials[threadIdx.x] += partials[threadIdx.x + 8];
    }
    __syncthreads();

    if (threadIdx.x < 4)
    {
        partials[threadIdx.x] += partials[threadIdx.x + 4];
    }
    __syncthreads();

    if (threadIdx.x == 0)
    {
        colSum[0] = partials[0] + partials[1] + partials[2] + partials[3];
        colSum[0] = (sizeof(ElemType) == sizeof(float)) ? logf(colSum[0]) : log(colSum[0]);
    }
    __syncthreads();

    for (int i = threadIdx.x; i < m_numRows; i += MAX_THREADS_PER_BLOCK)
    {
        ElemType tmp = us[IDX2C(i, blockIdx.x, m_numRows)] - colSum[0];
        us[IDX2C(i, blockIdx.x, m_numRows)] = (sizeof(ElemType) == sizeof(float)) ? expf(tmp) : exp(tmp);
    }
}

// us = softmax(a) down each column. a, us: device buffers of a column-major numRows x numCols matrix
// (GPUMatrix::Data()); t_stream: the stream GPUMatrix launches on.
template <class ElemType>
void AssignColumnwiseSoftmaxOf(const ElemType* a, ElemType* us, CUDA_LONG numRows, CUDA_LONG numCols,
                               cudaStream_t t_stream)
{
    CUDA_LONG N = numCols; // one block per column
    _assignColumnwiseSoftmaxOf<ElemType><<<N, 512, 0, t_stream>>>(a, us, N, numRows);
}

template void AssignColumnwiseSoftmaxOf<float>(const float*, float*, CUDA_LONG, CUDA_LONG, cudaStream_t);

}}} // namespace Microsoft::MSR::CNTK
