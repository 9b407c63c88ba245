// softmax over the last dimension as Hugging Face candle's CUDA kernels write it (candle-kernels/src/reduce.cu,
// the softmax<T, ACC> device template behind candle-nn's softmax_last_dim, itself adapted from an early ggml-cuda
// soft_max_f32), the f16 entry point: one row of n_cols per block and ONE WARP per row laid out along y (block
// (1, 32, 1), tid = threadIdx.y, row = blockDim.x * blockIdx.x + threadIdx.x), three passes over global memory:
//   max in the STORAGE type (maxg = __hmax_nan for half), shuffled as half,
//   e = expg(x - max) with the subtraction and the exponential in half (hexp), each e stored to dst as half and
//       summed in the accumulation type ACC = float,
//   dst *= 1 / sum, a half multiply-assign (the float reciprocal converted to half by __half's operator*=).
// candle's conventions: a templated __device__ function doing the work, one extern "C" __global__ entry per dtype
// (softmax_f32, softmax_f16, softmax_bf16: the names a Rust host loads from the PTX), argument order
// (src, dst, n_cols) with int n_cols, int element indices, no shared memory; the host (Rust, here C++) launches
// grid (n_rows, 1, 1), block (1, 32, 1), no dynamic smem, for contiguous input.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cmath>

__device__ __forceinline__ float maxg(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float expg(float a) { return expf(a); }
__device__ __forceinline__ __half maxg(__half a, __half b) { return __hmax_nan(a, b); }
__device__ __forceinline__ __half expg(__half a) { return hexp(a); }
__device__ __forceinline__ __nv_bfloat16 maxg(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmax_nan(a, b); }
__device__ __forceinline__ __nv_bfloat16 expg(__nv_bfloat16 a) { return hexp(a); }

template <typename T, typename ACC>
__device__ void softmax(const T * x, T * dst, const int ncols) {
    const int row = blockDim.x*blockIdx.x + threadIdx.x;
    const int block_size = blockDim.y;
    const int tid = threadIdx.y;

    T max_val = -INFINITY;

    for (int col = tid; col < ncols; col += block_size) {
        const int i = row*ncols + col;
        max_val = maxg(max_val, x[i]);
    }

    // find the max value in the block
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) {
        max_val = maxg(max_val, __shfl_xor_sync(0xffffffff, max_val, mask, 32));
    }

    ACC tmp = 0.;

    for (int col = tid; col < ncols; col += block_size) {
        const int i = row*ncols + col;
        const T val = expg(x[i] - max_val);
        tmp += static_cast<ACC>(val);
        dst[i] = val;
    }

    // sum up partial sums
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) {
        tmp += __shfl_xor_sync(0xffffffff, tmp, mask, 32);
    }

    const ACC inv_tmp = 1. / tmp;

    for (int col = tid; col < ncols; col += block_size) {
        const int i = row*ncols + col;
        dst[i] *= inv_tmp;
    }
}

extern "C" __global__ void softmax_f32(const float *src, float *dst, const int n_cols) {
    softmax<float, float>(src, dst, n_cols);
}

extern "C" __global__ void softmax_bf16(const __nv_bfloat16 *src, __nv_bfloat16 *dst, const int n_cols) {
    softmax<__nv_bfloat16, float>(src, dst, n_cols);
}

// The outputs are probabilities of about 1 / n_cols, far below the default fp16 absolute tolerance (1e-2), which
// would pass anything; atol 1e-6 keeps the relative tolerance in charge.
/* kerntune:
args  = ["src: in f16[n_rows * n_cols]", "dst: out f16[n_rows * n_cols]", "n_cols: i32 = n_cols"]
sizes = [{ n_rows = 65536, n_cols = 2048 }, { n_rows = 128, n_cols = 4096 }, { n_rows = 1001, n_cols = 3001 }]
grid  = "n_rows"
block = [1, 32]
atol  = 1e-6
*/
extern "C" __global__ void softmax_f16(const __half *src, __half *dst, const int n_cols) {
    softmax<__half, float>(src, dst, n_cols);
}

// candle-nn's softmax_last_dim on CUDA (there in Rust): src and dst contiguous [n_rows, n_cols]; device pointers.
void candle_softmax_last_dim_f16(const __half* src, __half* dst, uint32_t n_rows, int32_t n_cols,
                                 cudaStream_t stream) {
    const dim3 grid_dim(n_rows, 1, 1);
    const dim3 block_dim(1, 32, 1);
    softmax_f16<<<grid_dim, block_dim, 0, stream>>>(src, dst, n_cols);
}
