// Residual add + RMSNorm as ikawrakow's ik_llama.cpp (a llama.cpp fork; ggml/src/ggml-cuda/norm.cu,
// fused_add_rms_norm_f32<block_size> behind ggml_cuda_op_fused_add_rms_norm, the graph fusion of GGML_OP_ADD followed
// by its FUSED_RMS_NORM (rms_norm times the norm weight) that mainline ggml does not have in this form), fp32:
//   dst_add = a + b (the ADD node's own tensor, kept for the next residual), dst = rsqrtf(mean(dst_add^2) + eps) *
//   c[col] * dst_add, with the second loop RE-READING dst_add from global memory (no register or smem cache)
//   one row per block (row = blockIdx.x * blockDim.y + threadIdx.y with blockDim.y == 1), block_size a template
//   parameter chosen by the host: 256 threads for rows shorter than 1024, else 1024; ncols % 32 asserted
//   warp_reduce_sum (xor shuffles), then a static __shared__ float s_sum[32] only when block_size > WARP_SIZE, every
//   warp re-reducing the 32 partials; ggml's argument order (sources, weight, destinations, ncols, eps), static kernel
//   and launcher, int row * ncols indexing. The ggml_tensor plumbing is replaced by raw pointers and row counts.
#include <cuda_runtime.h>
#include <assert.h>

#define WARP_SIZE 32

static __device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(0xffffffff, x, offset, 32);
    }
    return x;
}

/* kerntune:
args  = ["a: in f32[nrows * ncols]", "b: in f32[nrows * ncols]", "c: in f32[ncols]",
         "dst_add: out f32[nrows * ncols]", "dst: out f32[nrows * ncols]", "ncols: i32 = ncols", "eps: f32 = 1e-6"]
sizes = [{ nrows = 8192, ncols = 4096 }, { nrows = 4, ncols = 4096 }, { nrows = 1001, ncols = 2880 }]
grid  = "nrows"
block = 1024
template_args = ["1024"]
*/
template <int block_size>
static __global__ void fused_add_rms_norm_f32(const float * a, const float * b, const float * c,
        float * dst_add, float * dst, const int ncols, const float eps) {
    const int row = blockIdx.x*blockDim.y + threadIdx.y;
    const int tid = threadIdx.x;

    float tmp = 0.0f; // this thread's part of the sum of squares

    for (int col = tid; col < ncols; col += block_size) {
        const float xi = a[row*ncols + col] + b[row*ncols + col];
        dst_add[row*ncols + col] = xi;
        tmp += xi * xi;
    }

    // warp sums, then across the warps
    tmp = warp_reduce_sum(tmp);
    if (block_size > WARP_SIZE) {
        __shared__ float s_sum[32];
        const int warp_id = threadIdx.x / WARP_SIZE;
        const int lane_id = threadIdx.x % WARP_SIZE;
        if (lane_id == 0) {
            s_sum[warp_id] = tmp;
        }
        __syncthreads();
        tmp = lane_id < block_size/WARP_SIZE ? s_sum[lane_id] : 0.0f;
        tmp = warp_reduce_sum(tmp);
    }

    const float mean  = tmp / ncols;
    const float scale = rsqrtf(mean + eps);

    for (int col = tid; col < ncols; col += block_size) {
        dst[row*ncols + col] = scale * c[col] * dst_add[row*ncols + col];
    }
}

// a, b: [nrows, ncols] f32 (the two ADD operands); c: [ncols] f32 norm weight; dst_add, dst: [nrows, ncols] f32.
static void fused_add_rms_norm_f32_cuda(const float * a, const float * b, const float * c, float * dst_add, float * dst,
        const int ncols, const int nrows, const float eps, cudaStream_t stream) {
    assert(ncols % WARP_SIZE == 0);
    if (ncols < 1024) {
        const dim3 block_dims(256, 1, 1);
        fused_add_rms_norm_f32<256><<<nrows, block_dims, 0, stream>>>(a, b, c, dst_add, dst, ncols, eps);
    } else {
        const dim3 block_dims(1024, 1, 1);
        fused_add_rms_norm_f32<1024><<<nrows, block_dims, 0, stream>>>(a, b, c, dst_add, dst, ncols, eps);
    }
}
