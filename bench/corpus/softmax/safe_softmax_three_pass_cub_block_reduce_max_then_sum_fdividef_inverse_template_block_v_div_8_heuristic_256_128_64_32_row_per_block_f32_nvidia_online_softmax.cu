// Row softmax as NVIDIA's online-softmax benchmark writes it (NVIDIA/online-softmax, online_softmax_benchmark.cu,
// the code of Milakov & Gimelshein, "Online normalizer calculation for softmax"): the "safe" softmax that the
// benchmark measures next to the naive and the online one, safe_softmax<THREADBLOCK_SIZE>. fp32: x [batch_size, V]
// logits, y [batch_size, V] probabilities, argument order (x, y, V), one vector (row) per block, blockIdx.x the
// vector, x and y repositioned to the row, THREADBLOCK_SIZE threads striding the row by the template constant.
// Three passes over global memory: the row max (per-thread fmaxf from -FLT_MAX, cub::BlockReduce<float,
// THREADBLOCK_SIZE>::Reduce with a max_op functor, thread 0 publishes m_total in shared memory), the normalizer
// (sum of __expf(x - m_total), BlockReduce::Sum reusing the same TempStorage, thread 0 stores
// d_total_inverse = __fdividef(1, d)), then y = __expf(x - m_total) * d_total_inverse recomputing the exponential.
// __launch_bounds__(THREADBLOCK_SIZE), __restrict (not __restrict__) pointers. The benchmark's launch heuristic is
// kept in the host launcher: max_threadblock_size = V / 8 ("at least 8 iterations of the loop"), then 256, 128, 64
// or 32 threads by thresholds; grid batch_size, default stream in the benchmark, a cudaStream_t here.
// Fixed: the row offset vector_id * V is int arithmetic and overflows past 2^31 elements (a 16384-row batch over a
// 152064-entry vocabulary); it is widened to size_t. The barrier between the max and the sum that reuses the
// BlockReduce storage is the __syncthreads after m_total, so the reuse is race free as written. Sizes: 2048 rows of a
// 32000 vocabulary, a decode batch of 4 rows of 128256, and 999 rows of 50257 (V / 8 >= 256 everywhere, so every
// size set runs the 256-thread instance; 50257 = 196 * 256 + 81).
// Tolerance: probabilities of ~1 / V (down to ~8e-6) sit far below the default f32 atol, so atol is 1e-6; __expf
// keeps the relative error well inside the f32 rtol.
#include <cuda_runtime.h>
#include <cub/cub.cuh>
#include <cfloat>

__device__ __forceinline__ float max_op(float a, float b)
{
    return fmaxf(a, b);
}

/* kerntune:
args  = ["x: in f32[batch_size * V]", "y: out f32[batch_size * V]", "V: i32 = V"]
sizes = [{ batch_size = 2048, V = 32000 }, { batch_size = 4, V = 128256 }, { batch_size = 999, V = 50257 }]
grid  = "batch_size"
block = 256
template_args = ["256"]
atol  = 1e-6
*/
template<int THREADBLOCK_SIZE>
__launch_bounds__(THREADBLOCK_SIZE)
__global__ void safe_softmax(
    const float * __restrict x,
    float * __restrict y,
    int V)
{
    int thread_id = threadIdx.x;
    int vector_id = blockIdx.x;

    // reposition x and y to data for the current vector (64-bit offset)
    x += (size_t)vector_id * V;
    y += (size_t)vector_id * V;

    typedef cub::BlockReduce<float, THREADBLOCK_SIZE> BlockReduce;

    __shared__ typename BlockReduce::TempStorage temp_storage;
    __shared__ float m_total;
    __shared__ float d_total_inverse;

    float m_partial = -FLT_MAX;
    for(int elem_id = thread_id; elem_id < V; elem_id += THREADBLOCK_SIZE)
        m_partial = max_op(m_partial, x[elem_id]);

    float m = BlockReduce(temp_storage).Reduce(m_partial, max_op);
    if (thread_id == 0)
        m_total = m;
    __syncthreads();

    float d_partial = 0.0F;
    for(int elem_id = thread_id; elem_id < V; elem_id += THREADBLOCK_SIZE)
        d_partial += __expf(x[elem_id] - m_total);

    float d = BlockReduce(temp_storage).Sum(d_partial);
    if (thread_id == 0)
        d_total_inverse = __fdividef(1.0F, d);
    __syncthreads();

    for(int elem_id = thread_id; elem_id < V; elem_id += THREADBLOCK_SIZE)
        y[elem_id] = __expf(x[elem_id] - m_total) * d_total_inverse;
}

// x, y: device [batch_size, V] row-major fp32.
void run_safe_softmax(const float * x, float * y, int V, int batch_size, cudaStream_t stream)
{
    // Heuristic to have at least 8 iterations of the loop
    int max_threadblock_size = V / 8;

    if (max_threadblock_size >= 256)
        safe_softmax<256><<<batch_size, 256, 0, stream>>>(x, y, V);
    else if (max_threadblock_size >= 128)
        safe_softmax<128><<<batch_size, 128, 0, stream>>>(x, y, V);
    else if (max_threadblock_size >= 64)
        safe_softmax<64><<<batch_size, 64, 0, stream>>>(x, y, V);
    else
        safe_softmax<32><<<batch_size, 32, 0, stream>>>(x, y, V);
}
