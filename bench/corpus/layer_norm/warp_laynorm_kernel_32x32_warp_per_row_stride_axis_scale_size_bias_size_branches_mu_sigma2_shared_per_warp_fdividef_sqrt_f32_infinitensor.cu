// LayerNorm as the InfiniTensor deep-learning compiler / runtime writes it for CUDA (InfiniTensor/InfiniTensor,
// src/kernels/cuda/layer_norm.cu, warpLaynormKernel<T, BLOCK_DIM_x, BLOCK_DIM_y> behind infini::LaynormKernel, the
// kernel its LayerNormObj uses for normalized dimensions of 32..1024 elements). float throughout: the tensor is
// seen as otherSize = size / dimsize rows along an axis with element stride `stride` (1 when the normalized axis is
// the last one, as here): row otherIdx starts at otherIdx % stride + (otherIdx - otherIdx % stride) * dimsize and
// its elements are `stride` apart. A block (32, 32): one warp per row (threadIdx.y), 32 rows per block, grid
// ceil(otherSize / 32); each lane strides the row by BLOCK_DIM_x in `ph` steps, WarpAllReduce<SumOp, T, 32> (xor
// butterfly), lane 0 stores mean = sum * __fdividef(1, dimsize) in __shared__ muTotal[threadIdx.y], a second pass
// re-reads the row for sum((x - mu)^2) into sigma2Total[threadIdx.y]; the store pass re-reads x a third time,
// y = scale * (x - mu) * __fdividef(1, sqrt(sigma2 + eps)) + bias, with runtime scaleSize / biasSize choosing per
// element or broadcast scale and bias (four branches), eps of type T. Argument order (input, scale, dimsize,
// stride, output, eps, scaleSize, otherSize, bias, biasSize). The host dispatch keeps InfiniTensor's warp shapes
// by dimsize: (32, 32) above 31, (16, 64) above 15, (8, 128) above 7; its block kernel for dimsize > 1024 and its
// smallest branch are left out (the launcher returns false there).
// Fixed: lane 0 wrote muTotal / sigma2Total and the other lanes of the warp read them with no synchronization
// (a race under independent thread scheduling): a __syncwarp after each write. With 16- or 8-wide groups a warp
// holds several rows and a row past otherSize leaves its group out of the full-mask shuffles: the shuffles and
// the __syncwarp use __activemask().
#include <cuda_runtime.h>
#include <cmath>

template <typename T> struct SumOp {
    __device__ __forceinline__ T operator()(const T &a, const T &b) const {
        return a + b;
    }
};

template <template <typename> class ReductionOp, typename T,
          int thread_group_width>
__inline__ __device__ T WarpAllReduce(T val) {
    const unsigned active = __activemask();  // rows past otherSize leave whole groups idle
    for (int mask = thread_group_width / 2; mask > 0; mask /= 2) {
        val = ReductionOp<T>()(val, __shfl_xor_sync(active, val, mask));
    }
    return val;
}

/* kerntune:
args  = ["input: in f32[otherSize * dimsize]", "scale: in f32[dimsize]", "dimsize: i32 = dimsize",
         "stride: i32 = 1", "output: out f32[otherSize * dimsize]", "eps: f32 = 1e-5",
         "scaleSize: i32 = dimsize", "otherSize: i32 = otherSize", "bias: in f32[dimsize]",
         "biasSize: i32 = dimsize"]
sizes = [{ otherSize = 65536, dimsize = 1024 }, { otherSize = 4, dimsize = 768 },
         { otherSize = 999, dimsize = 1001 }]
grid  = "cdiv(otherSize, 32)"
block = [32, 32]
template_args = ["float", "32", "32"]
*/
template <typename T, int BLOCK_DIM_x, int BLOCK_DIM_y>
__global__ void warpLaynormKernel(const T *input, const T *scale,
                                  const int dimsize, const int stride,
                                  T *output, const T eps, int scaleSize,
                                  int otherSize, const T *bias, int biasSize) {
    int otherIdx = blockIdx.x * blockDim.y + threadIdx.y;

    int tid = otherIdx % stride + (otherIdx - otherIdx % stride) * dimsize;
    if (otherIdx < otherSize) {

        __shared__ T muTotal[BLOCK_DIM_y];
        __shared__ T sigma2Total[BLOCK_DIM_y];

        T muPartial = 0.0f;

        for (int ph = 0; threadIdx.x + ph * BLOCK_DIM_x < dimsize; ph++) {
            muPartial += input[tid + (threadIdx.x + ph * BLOCK_DIM_x) * stride];
        }

        muPartial = WarpAllReduce<SumOp, T, BLOCK_DIM_x>(muPartial);

        if (threadIdx.x == 0)
            muTotal[threadIdx.y] =
                muPartial * static_cast<T>(__fdividef(1.0F, dimsize));
        __syncwarp(__activemask());

        //--------------------------------------------
        T sigma2Partial = 0.0f;

        for (int ph = 0; threadIdx.x + ph * BLOCK_DIM_x < dimsize; ph++) {
            sigma2Partial +=
                (input[tid + (threadIdx.x + ph * BLOCK_DIM_x) * stride] -
                 muTotal[threadIdx.y]) *
                (input[tid + (threadIdx.x + ph * BLOCK_DIM_x) * stride] -
                 muTotal[threadIdx.y]);
        }

        sigma2Partial = WarpAllReduce<SumOp, T, BLOCK_DIM_x>(sigma2Partial);

        if (threadIdx.x == 0)
            sigma2Total[threadIdx.y] =
                sigma2Partial * static_cast<T>(__fdividef(1.0F, dimsize));
        __syncwarp(__activemask());

        //--------------------------------------------
        if (biasSize == dimsize) {
            if (scaleSize == dimsize) {
                for (int ph = 0; threadIdx.x + ph * BLOCK_DIM_x < dimsize;
                     ph++) {

                    output[tid + (threadIdx.x + ph * BLOCK_DIM_x) * stride] =
                        scale[threadIdx.x + ph * BLOCK_DIM_x] *
                            (input[tid +
                                   (threadIdx.x + ph * BLOCK_DIM_x) * stride] -
                             muTotal[threadIdx.y]) *
                            static_cast<T>(__fdividef(
                                1.0F, sqrt(static_cast<float>(
                                          sigma2Total[threadIdx.y] + eps)))) +
                        bias[threadIdx.x + ph * BLOCK_DIM_x];
                }
            } else {
                for (int ph = 0; threadIdx.x + ph * BLOCK_DIM_x < dimsize;
                     ph++) {

                    output[tid + (threadIdx.x + ph * BLOCK_DIM_x) * stride] =
                        scale[0] *
                            (input[tid +
                                   (threadIdx.x + ph * BLOCK_DIM_x) * stride] -
                             muTotal[threadIdx.y]) *
                            static_cast<T>(__fdividef(
                                1.0F, sqrt(static_cast<float>(
                                          sigma2Total[threadIdx.y] + eps)))) +
                        bias[threadIdx.x + ph * BLOCK_DIM_x];
                }
            }
        } else {
            if (scaleSize == dimsize) {
                for (int ph = 0; threadIdx.x + ph * BLOCK_DIM_x < dimsize;
                     ph++) {

                    output[tid + (threadIdx.x + ph * BLOCK_DIM_x) * stride] =
                        scale[threadIdx.x + ph * BLOCK_DIM_x] *
                            (input[tid +
                                   (threadIdx.x + ph * BLOCK_DIM_x) * stride] -
                             muTotal[threadIdx.y]) *
                            static_cast<T>(__fdividef(
                                1.0F, sqrt(static_cast<float>(
                                          sigma2Total[threadIdx.y] + eps)))) +
                        bias[0];
                }
            } else {
                for (int ph = 0; threadIdx.x + ph * BLOCK_DIM_x < dimsize;
                     ph++) {

                    output[tid + (threadIdx.x + ph * BLOCK_DIM_x) * stride] =
                        scale[0] *
                            (input[tid +
                                   (threadIdx.x + ph * BLOCK_DIM_x) * stride] -
                             muTotal[threadIdx.y]) *
                            static_cast<T>(__fdividef(
                                1.0F, sqrt(static_cast<float>(
                                          sigma2Total[threadIdx.y] + eps)))) +
                        bias[0];
                }
            }
        }
    }
}

namespace infini {
// input, output: device tensors of `size` floats, normalized over an axis of dimsize elements that are `stride`
// apart; scale / bias of scaleSize / biasSize elements (dimsize, or 1 to broadcast).
bool LaynormKernel(const float *input, const float *scale, const float eps,
                   int size, int scaleSize, const int dimsize, const int stride,
                   float *output, const float *bias, int biasSize,
                   cudaStream_t stream) {
    int num_block = size / dimsize;
    if (dimsize > 1024) {
        return false;  // blockLaynormKernel<float, 1024> in InfiniTensor, not part of this file
    } else if (dimsize > 31) {
        int BLOCK_DIM_x = 32;
        int BLOCK_DIM_y = 32;
        int num_block_x = (num_block + BLOCK_DIM_y - 1) / BLOCK_DIM_y;
        dim3 block_dim(BLOCK_DIM_x, BLOCK_DIM_y, 1);
        dim3 grid_dim(num_block_x, 1, 1);

        warpLaynormKernel<float, 32, 32><<<grid_dim, block_dim, 0, stream>>>(
            input, scale, dimsize, stride, output, eps, scaleSize, num_block,
            bias, biasSize);
    } else if (dimsize > 15) {
        int BLOCK_DIM_x = 16;
        int BLOCK_DIM_y = 64;
        int num_block_x = (num_block + BLOCK_DIM_y - 1) / BLOCK_DIM_y;
        dim3 block_dim(BLOCK_DIM_x, BLOCK_DIM_y, 1);
        dim3 grid_dim(num_block_x, 1, 1);

        warpLaynormKernel<float, 16, 64><<<grid_dim, block_dim, 0, stream>>>(
            input, scale, dimsize, stride, output, eps, scaleSize, num_block,
            bias, biasSize);
    } else if (dimsize > 7) {
        int BLOCK_DIM_x = 8;
        int BLOCK_DIM_y = 128;
        int num_block_x = (num_block + BLOCK_DIM_y - 1) / BLOCK_DIM_y;
        dim3 block_dim(BLOCK_DIM_x, BLOCK_DIM_y, 1);
        dim3 grid_dim(num_block_x, 1, 1);

        warpLaynormKernel<float, 8, 128><<<grid_dim, block_dim, 0, stream>>>(
            input, scale, dimsize, stride, output, eps, scaleSize, num_block,
            bias, biasSize);
    } else {
        return false;
    }
    return true;
}
} // namespace infini
