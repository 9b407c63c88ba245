// Channel softmax over an NCHW tensor in the style of AMD MIOpen (src/kernels/MIOpenSoftmax.cl, SoftmaxForward
// with MIOPEN_SOFTMAX_MODE_CHANNEL and the ACCURATE algorithm, launched by src/ocl/softmaxocl.cpp; e.g. the
// per-pixel class scores of a segmentation net), its OpenCL kernel written as CUDA, fp16 (MIOPEN_USE_FP16):
//   x, y [N, C, H, W] packed (IS_INPUT_PACKED, IS_OUTPUT_PACKED), OUT OF PLACE; the softmax runs over the C
//   channels of each pixel: element (n, c, s) at (n * C + c) * spatial_dim + s (mad24), vector_size = C,
//   grid_size = N * H * W pixels, spatial_dim = H * W; unused alpha / beta kept (USE_ALPHA = USE_BETA = 0)
//   CSR-STREAM path (C < 256): a 256-thread workgroup handles NUM_BATCH pixels, BATCH_SIZE = 256 / NUM_BATCH
//   threads per pixel, each thread keeping U_BATCH_SIZE channel values; NUM_BATCH = nextPow2(256 / C),
//   U_BATCH_SIZE = C > BATCH_SIZE ? nextPow2(C / BATCH_SIZE) : 1 (MIOpen's nextPow2(1) is 2) - compile-time -D
//   parameters in MIOpen, template parameters here (spec = <16, 16, 2>, C = 21 classes as PASCAL VOC)
//   _FLOAT is half and ALL arithmetic is half: max, x - max, exp, the sum and the division (hexp, __hsub, __hadd,
//   __hdiv), -MAX_VAL = -65504; the fp16 path keeps the values in LOCAL memory (__shared__ half
//   values[U_BATCH_SIZE * 256], MIOpen's workaround for a ROCm 2.0 compiler issue), not registers
//   reductions: a shared l_helper[256] halving tree restricted to each pixel's BATCH_SIZE threads, barriers for the
//   whole workgroup; the tail pixels past grid_size are guarded by the flat index (< C * grid_size)
//   grid ceil(N * H * W / NUM_BATCH) workgroups of 256
// Fixed: the fp16 path left values[] of guarded-off slots (tail pixels) unset and then read them in the sum loop
// (only the fp32 path initialised them); they are set to -MAX_VAL as the fp32 path does. The CSR-Vector path
// (C >= 256) is not part of this file; the launcher asserts C < 256.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cassert>

#define MAX_VAL 65504 /* max value */

/* kerntune:
args  = ["x: in f16[N * C * H * W]", "y: out f16[N * C * H * W]", "vector_size: i32 = C",
         "grid_size: i32 = N * H * W", "spatial_dim: i32 = H * W", "alpha: f32 = 1.0", "beta: f32 = 0.0"]
sizes = [{ N = 16, C = 21, H = 256, W = 256 }, { N = 1, C = 21, H = 8, W = 8 }, { N = 3, C = 21, H = 97, W = 131 }]
grid  = "cdiv(N * H * W, 16)"
block = 256
template_args = ["16", "16", "2"]
*/
template <int NUM_BATCH, int BATCH_SIZE, int U_BATCH_SIZE>
__global__ void SoftmaxForward(const half* x, half* y, const int vector_size, const int grid_size,
                               const int spatial_dim, const float alpha, const float beta) {
    (void)alpha;  // USE_ALPHA = 0
    (void)beta;   // USE_BETA = 0
    __shared__ half l_helper[256];
    // Local memory holds the values for fp16 (MIOpen's Comment1)
    __shared__ half values[U_BATCH_SIZE * 256];

    int gid = blockIdx.x;
    int lid = threadIdx.x;

    // ID of the thread within the batch
    int batch_lid = lid & (BATCH_SIZE - 1);  // thread specific channel_st
    int batch = lid / BATCH_SIZE;            // which spatial_dim or pixel

    // Batch specific n and s
    int batch_n = (NUM_BATCH * gid + batch) / spatial_dim;  // nth image
    int batch_s = (NUM_BATCH * gid + batch) % spatial_dim;  // which spatial_dim/pixel

    l_helper[lid] = __float2half(-MAX_VAL);
    half t_helper = __float2half(-MAX_VAL);  // thread_local helper var
    for (int i = 0; i < U_BATCH_SIZE; i++) {
        values[lid * U_BATCH_SIZE + i] = __float2half(-MAX_VAL);
    }

    // Compute max per channel
    // BATCH_SIZE threads iterate over the channels
    int index0 = batch_lid / BATCH_SIZE;
    int index = index0;
    for (int i = batch_lid; i < vector_size; i += BATCH_SIZE, index++) {
        if ((batch_n * vector_size + i) * spatial_dim + batch_s < vector_size * grid_size) {
            int x_gidx = (batch_n * vector_size + i) * spatial_dim + batch_s;
            half tmp = x[x_gidx];
            t_helper = __hmax(tmp, t_helper);
            values[lid * U_BATCH_SIZE + index] = tmp;
        }
    }

    // Now we have to compute the max from 256 values (one per each thread)
    l_helper[lid] = t_helper;
    __syncthreads();

    // Logarithmic reduction to compute the max.
    for (int i = (BATCH_SIZE >> 1); i > 0; i >>= 1) {
        if (batch_lid < i) {
            l_helper[lid] = __hmax(l_helper[lid], l_helper[lid + i]);
        }
        __syncthreads();
    }

    half channel_max = l_helper[batch * BATCH_SIZE];
    t_helper = __float2half(0.f);

    __syncthreads();
    // Subtract channel_max from each value
    index = index0;
    for (int i = batch_lid; i < vector_size; i += BATCH_SIZE, index++) {
        // Compute exponent of each value
        // Then sum all the values touched by this thread
        int v_idx = index + lid * U_BATCH_SIZE;

        half tmp = values[v_idx];
        tmp = __hsub(tmp, channel_max);
        tmp = hexp(tmp);
        t_helper = __hadd(t_helper, tmp);

        values[v_idx] = tmp;
    }

    l_helper[lid] = t_helper;
    __syncthreads();

    // Compute sum of 256 values (one for each thread)
    // Logarithmic reduction to compute the sum
    for (int i = (BATCH_SIZE >> 1); i > 0; i >>= 1) {
        if (batch_lid < i) {
            l_helper[lid] = __hadd(l_helper[lid], l_helper[lid + i]);
        }
        __syncthreads();
    }

    half channel_sum = l_helper[batch * BATCH_SIZE];

    // Normalize each value in the channel by the channel_sum
    index = index0;
    for (int i = batch_lid; i < vector_size; i += BATCH_SIZE, index++) {
        if ((batch_n * vector_size + i) * spatial_dim + batch_s < vector_size * grid_size) {
            int y_gidx = (batch_n * vector_size + i) * spatial_dim + batch_s;
            int v_idx = index + lid * U_BATCH_SIZE;
            values[v_idx] = __hdiv(values[v_idx], channel_sum);
            y[y_gidx] = values[v_idx];
        }
    }
}

namespace miopen {

int nextPow2(int v) {
    if (v == 1) {
        return (v << 1);
    } else {
        v--;
        v |= v >> 1;
        v |= v >> 2;
        v |= v >> 4;
        v |= v >> 8;
        v |= v >> 16;
        v++;
        return v;
    }
}

#define MIOPEN_SOFTMAX_CASE(NB, U)                                                                          \
    if (num_batch == NB && u_batch_size == U) {                                                            \
        ::SoftmaxForward<NB, 256 / NB, U><<<workgroups, 256, 0, stream>>>(x, y, c, grid_size, spatial_dim,   \
                                                                        alpha, beta);                      \
        return;                                                                                            \
    }

// x, y: device [n, c, h, w] fp16, packed; softmax over c (channel mode, accurate). c < 256.
void SoftmaxForward(const half* x, half* y, int n, int c, int h, int w, float alpha, float beta,
                    cudaStream_t stream) {
    // using workgroup size of 256 by default
    int grid_size = n * h * w;
    int spatial_dim = h * w;
    // num_spatial_dims or pixels each workgroup can compute
    int num_batch = c < 256 ? nextPow2(256 / c) : 1;
    assert(num_batch > 1 && "CSR-Vector path (c >= 256) not built here");

    // num_threads iterating over channels for one spatial_dim
    int batch_size = 256 / num_batch;
    // num_channels each threads iterates over to cover all the channels
    int u_batch_size = c > batch_size ? nextPow2(c / batch_size) : 1;
    int workgroups = grid_size % num_batch == 0 ? grid_size / num_batch : grid_size / num_batch + 1;

    MIOPEN_SOFTMAX_CASE(2, 1) MIOPEN_SOFTMAX_CASE(2, 2)
    MIOPEN_SOFTMAX_CASE(4, 1) MIOPEN_SOFTMAX_CASE(4, 2)
    MIOPEN_SOFTMAX_CASE(8, 1) MIOPEN_SOFTMAX_CASE(8, 2)
    MIOPEN_SOFTMAX_CASE(16, 1) MIOPEN_SOFTMAX_CASE(16, 2)
    MIOPEN_SOFTMAX_CASE(32, 1) MIOPEN_SOFTMAX_CASE(32, 2)
    MIOPEN_SOFTMAX_CASE(64, 1) MIOPEN_SOFTMAX_CASE(64, 2)
    MIOPEN_SOFTMAX_CASE(128, 1) MIOPEN_SOFTMAX_CASE(128, 2)
    MIOPEN_SOFTMAX_CASE(256, 1) MIOPEN_SOFTMAX_CASE(256, 2)
    assert(false && "unsupported NUM_BATCH / U_BATCH_SIZE");
}

}  // namespace miopen
