// Softmax along any axis as the European Distributed Deep Learning library writes it for its GPU back end
// (deephealthproject/eddl, src/hardware/gpu/nn/gpu_activations_kernels.cu full_softmax_nd, launched by
// gpu_full_softmax_nd in gpu_activations.cu, behind gpu_full_softmax(A, B, axis, stable) for the Softmax layer):
//   fp32, out of place, natural row-major tensor; for the softmax axis: chuck_size = shape[axis], n_samples =
//   size / chuck_size, inner_stride = stride[axis], sample_stride = chuck_size * stride[axis], k_stride =
//   (chuck_size - 1) * stride[axis]; ONE THREAD PER SAMPLE (outer, inner position): start_b = si % inner_stride +
//   si / inner_stride * sample_stride, walking i = start_b .. start_b + k_stride (INCLUSIVE end) by inner_stride
//   (adjacent threads read adjacent inner positions; for the last axis, inner_stride 1, a thread walks a row)
//   three serial passes over global memory: max (only when `stable`), e = expf(A[i] - max) written to B and summed
//   into a denominator that STARTS AT GPU_EPS_FLOAT (1.19209e-07f, machine epsilon), then B[i] /= denominator
//   argument order (A, B, stable, n_samples, inner_stride, sample_stride, k_stride), int sizes, bool flag
//   launch: blockSize = MAX_TPB = 1024, numBlocks = ceil(n_samples / 1024); the host takes the tensor's shape and
//   the axis (EDDL's Tensor shape / stride) and a stream instead of the Tensor object and cudaDeviceSynchronize
// Fixed: with stable == false the max stayed GPU_LOWEST_FLOAT (-3.4e38), although the comment says "no stable =>
// 0.0f", so every expf(A[i] + 3.4e38) was inf and the output NaN; the unstable path now starts from 0.0f. The size
// sets use stable = true (the path EDDL's layers take). GPU_EPS_FLOAT / GPU_LOWEST_FLOAT are written without the
// trailing semicolons of EDDL's #defines.
// Tolerance: probabilities of ~1 / axis (down to ~3e-5 over a 32000-entry axis) sit at the default f32 atol, so
// atol is 1e-6 and the relative tolerance stays at the f32 default.
#include <cuda_runtime.h>

#include <vector>

// MAX THREADS PER BLOCK
#define MAX_TPB 1024
#define GPU_EPS_FLOAT 1.19209e-07f     // Machine epsilon
#define GPU_LOWEST_FLOAT -3.40282e+38f  // the negative of max()

/* kerntune:
args  = ["A: in f32[N * C * H * W]", "B: out f32[N * C * H * W]", "stable: u8 = 1",
         "n_samples: i32 = N * H * W", "inner_stride: i32 = H * W", "sample_stride: i32 = C * H * W",
         "k_stride: i32 = (C - 1) * H * W"]
sizes = [{ N = 16, C = 64, H = 128, W = 128 }, { N = 4, C = 32000, H = 1, W = 1 },
         { N = 3, C = 21, H = 77, W = 99 }]
grid  = "cdiv(N * H * W, 1024)"
block = 1024
atol  = 1e-6
*/
__global__ void full_softmax_nd(float *A, float *B, bool stable, int n_samples, int inner_stride, int sample_stride, int k_stride){
    long int thread_id_x = blockIdx.x*blockDim.x + threadIdx.x; // Sample index

    if (thread_id_x < n_samples){
        int si = (int)thread_id_x; // Alias

        int start_b = si % inner_stride + si/inner_stride * sample_stride;
        int end_b = start_b + k_stride;

        // Numerical stability (opt.)
        // stable => lowest value, then the max; no stable => 0.0f
        float max_value = stable ? GPU_LOWEST_FLOAT : 0.0f;
        if(stable){
            for (int i = start_b; i <= end_b; i += inner_stride) {
                if (A[i] > max_value) { max_value = A[i]; }
            }
        }

        // Numerator
        float denominator = GPU_EPS_FLOAT;
        for (int i = start_b; i <= end_b; i += inner_stride) {
            float value = expf(A[i] - max_value);  // Highest number should be zero
            B[i] = value;
            denominator += value;
        }

        // Softmax
        for (int i = start_b; i <= end_b; i += inner_stride) {
            B[i] /= denominator;
        }
    }
}

// A, B: device tensors of `shape` (row-major, fp32); softmax along `axis`.
void gpu_full_softmax_nd(float *A, float *B, const std::vector<int> &shape, int axis, bool stable, cudaStream_t stream){
    // Tensor::size and Tensor::stride (row-major)
    int size = 1;
    for (int d : shape) size *= d;
    std::vector<int> stride(shape.size(), 1);
    for (int d = (int)shape.size() - 2; d >= 0; d--) stride[d] = stride[d + 1] * shape[d + 1];

    // Get values
    int chuck_size = shape[axis];
    int n_samples = size/chuck_size;
    int inner_stride = stride[axis];
    int sample_stride = chuck_size*stride[axis];
    int k_stride = (chuck_size-1)*stride[axis];

    // Calculate cuda blocks
    int blockSize = MAX_TPB;
    int numBlocks = (n_samples + blockSize - 1) / blockSize; // Same as: ceil(N/threads_block)

    full_softmax_nd<<<numBlocks, blockSize, 0, stream>>>(A, B, stable, n_samples, inner_stride, sample_stride, k_stride);
}
