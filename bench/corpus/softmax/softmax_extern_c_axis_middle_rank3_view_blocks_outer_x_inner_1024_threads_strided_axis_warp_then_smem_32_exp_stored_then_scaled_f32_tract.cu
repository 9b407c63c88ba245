// Softmax as Sonos tract writes it for its CUDA back end (sonos/tract, cuda/src/kernels/cu/nn.cu INSTANTIATE_SOFTMAX
// -> extern "C" softmax_f32 / softmax_small_f32, dispatched from cuda/src/kernels/nn/softmax.rs Softmax::dispatch_eval).
// fp32, out of place, softmax along ANY axis: the host reshapes the tensor to rank 3 around the axis
// (utils::reshape_to_rank_3 -> [outer, axis, inner]) with natural strides, and the kernel takes the three shapes and
// three strides as int32 (argument order x, dst, shape_0, shape_1, shape_2, stride_0, stride_1, stride_2). One block
// per (outer, inner) pair, grid outer * inner, blockIdx.x split as (blockIdx.x / shape_2, blockIdx.x % shape_2); the
// threads stride the softmax axis by blockDim.x with element stride stride_1 (contiguous when inner == 1). Three
// passes over global memory: the max (warp xor butterfly, then for blocks above a warp a __shared__ s_max[32] that
// warp 0 clears to -inf, lane 0 of each warp writes, every warp re-reduces), then expf(x - max) written to dst and
// summed (same two-level reduction through s_sum[32]), then dst *= 1 / sum. Kernel choice by the axis length:
// softmax_small_f32 (32 threads, the warp-only path) below MAX_THREADS = 1024, softmax_f32 with 1024 threads from
// 1024 up; only the 1024-thread kernel is written here (the macro body expanded for block_size = 1024 and T =
// float, since the macro cannot be read as source; its _Pragma("unroll") written as #pragma unroll), so the
// launcher returns false below 1024 (every size set has an axis >= 1024). The third size set softmaxes the middle axis of a [37, 1031, 5] tensor (element stride 5).
// No bug found in this path. The Rust launch (cudarc LaunchConfig, TractCudaStream) is written as a plain C++
// launcher over device pointers and a cudaStream_t.
// Tolerance: probabilities of ~1 / axis (down to ~3e-5 over a 32000-entry vocabulary) sit at the default f32 atol,
// so atol is 1e-6 and the relative tolerance stays at the f32 default.
#include <cuda_runtime.h>
#include <math_constants.h>
#include <array>
#include <cstdint>

#define WARP_SIZE 32
#define MAX_THREADS 1024

static __device__ __forceinline__ float warp_reduce_max(float x) {
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, offset, WARP_SIZE));
    }
    return x;
}

static __device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(0xffffffff, x, offset, WARP_SIZE);
    }
    return x;
}

/* kerntune:
args  = ["x: in f32[outer * axis * inner]", "dst: out f32[outer * axis * inner]", "shape_0: i32 = outer",
         "shape_1: i32 = axis", "shape_2: i32 = inner", "stride_0: i32 = axis * inner", "stride_1: i32 = inner",
         "stride_2: i32 = 1"]
sizes = [{ outer = 8192, axis = 4096, inner = 1 }, { outer = 4, axis = 32000, inner = 1 },
         { outer = 37, axis = 1031, inner = 5 }]
grid  = "outer * inner"
block = 1024
atol  = 1e-6
*/
extern "C" __global__ void softmax_f32(const float *x, float *dst, const int32_t shape_0, const int32_t shape_1,
                                       const int32_t shape_2, const int32_t stride_0, const int32_t stride_1,
                                       const int32_t stride_2) {
    constexpr int block_size = 1024;  // the "" (non-small) instantiation
    const int offset = (blockIdx.x % shape_2) * stride_2 + (blockIdx.x / shape_2) * stride_0;
    x += offset;
    dst += offset;

    const int warp_id = threadIdx.x / WARP_SIZE;
    const int lane_id = threadIdx.x % WARP_SIZE;

    // pass 1: max along the axis
    float max_val = -CUDART_INF_F;
#pragma unroll
    for (int i = threadIdx.x; i < shape_1; i += blockDim.x) {
        max_val = max(max_val, x[i * stride_1]);
    }
    max_val = warp_reduce_max(max_val);
    if (block_size > WARP_SIZE) {
        __shared__ float s_max[32];
        if (warp_id == 0) {
            s_max[lane_id] = -CUDART_INF_F;
        }
        __syncthreads();
        if (lane_id == 0) {
            s_max[warp_id] = max_val;
        }
        __syncthreads();
        max_val = s_max[lane_id];
        max_val = warp_reduce_max(max_val);
    }

    // pass 2: exponentials into dst, and their sum
    float tmp = 0.0f;
    for (int i = threadIdx.x; i < shape_1; i += blockDim.x) {
        const float el = x[i * stride_1];
        const float val = expf(el - max_val);
        tmp += val;
        dst[i * stride_1] = val;
    }
    tmp = warp_reduce_sum(tmp);
    if (block_size > WARP_SIZE) {
        __shared__ float s_sum[32];
        if (warp_id == 0) {
            s_sum[lane_id] = 0.0f;
        }
        __syncthreads();
        if (lane_id == 0) {
            s_sum[warp_id] = tmp;
        }
        __syncthreads();
        tmp = s_sum[lane_id];
        tmp = warp_reduce_sum(tmp);
    }

    // pass 3: scale in place
    const float inv_sum = 1.0f / tmp;
    for (int i = threadIdx.x; i < shape_1; i += blockDim.x) {
        dst[i * stride_1] *= inv_sum;
    }
}

// Softmax::dispatch_eval for an f32 tensor of `rank` dims `shape`, along `axis`: input / output device buffers of
// the same shape, natural (row-major) layout. Returns false where the 32-thread kernel would be needed.
bool tract_cuda_softmax_f32(const float *input, float *output, const int64_t *shape, int rank, int axis,
                            cudaStream_t stream) {
    // reshape_to_rank_3: [prod(shape[..axis]), shape[axis], prod(shape[axis+1..])]
    int64_t shape_nd3[3] = {1, shape[axis], 1};
    for (int d = 0; d < axis; ++d) shape_nd3[0] *= shape[d];
    for (int d = axis + 1; d < rank; ++d) shape_nd3[2] *= shape[d];
    // Tensor::natural_strides
    const int64_t strides_nd3[3] = {shape_nd3[1] * shape_nd3[2], shape_nd3[2], 1};

    if (shape_nd3[1] < MAX_THREADS) {
        return false;  // softmax_small_f32 (block 32), not part of this file
    }

    const dim3 grid((unsigned)(shape_nd3[0] * shape_nd3[2]), 1, 1);
    const dim3 block(MAX_THREADS, 1, 1);
    softmax_f32<<<grid, block, 0, stream>>>(input, output, (int32_t)shape_nd3[0], (int32_t)shape_nd3[1],
                                            (int32_t)shape_nd3[2], (int32_t)strides_nd3[0], (int32_t)strides_nd3[1],
                                            (int32_t)strides_nd3[2]);
    return true;
}
