// Multiclass probability transform as ThunderGBM writes it (Xtra-Computing/thundergbm, a GPU gradient boosting
// library: src/thundergbm/objective/multiclass_obj.cu, SoftmaxProb::predict_transform, run through device_loop of
// include/thundergbm/util/device_lambda.cuh). The raw scores y are CLASS-MAJOR: y[num_class * n_instances], the
// score of class k for instance i at yp_data[k * n_instances + i], so the softmax runs over a strided axis (stride
// n_instances) and neighbouring threads read neighbouring instances. fp32 (float_type, the default build), in place:
// one thread per instance, a serial loop over the classes: the max (starting from class 0, fmaxf), then
// yp_data = expf(y - max) stored back and summed, then yp_data /= sum. Launch: device_loop<NUM_BLOCK = 32 * 56,
// BLOCK_SIZE = 256> ("p100 has 56 MPs, using 32*56 thread blocks"): a FIXED grid of 1792 blocks of 256 threads,
// lambda_kernel's grid-stride loop for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < len; i += blockDim.x *
// gridDim.x), default stream. Changed: the
// __device__ lambda (captures yp_data, num_class, n_instances) is written out as a named kernel with the captures
// as parameters after lambda_kernel's (size_t len) -- device lambdas need nvcc's --extended-lambda; the
// SyncArray<float_type> becomes a raw device pointer and the launcher the code of predict_transform; the
// cudaDeviceSynchronize + cudaPeekAtLastError after the launch become one cudaGetLastError check. No bug found
// (a len of 0 is skipped on the host; int indices are fine below 2^31 scores). Sizes: 262144 instances of 128
// classes, 4 instances of 1000 classes (a few threads of a 1792-block grid), 99999 instances of 37 classes.
// Tolerance: probabilities down to ~1e-3 at 1000 classes and much smaller for skewed rows; atol 1e-6 with the f32
// default rtol.
#include <cuda_runtime.h>
#include <cstddef>
#include <cstdio>

typedef float float_type;

#define CUDA_CHECK(condition) \
    do { cudaError_t error = condition; if (error != cudaSuccess) { fprintf(stderr, "CUDA error %d\n", (int)error); } } while (0)

/* kerntune:
args  = ["len: u64 = n_instances", "yp_data: inout f32[num_class * n_instances]", "num_class: i32 = num_class",
         "n_instances: i32 = n_instances"]
sizes = [{ n_instances = 262144, num_class = 128 }, { n_instances = 4, num_class = 1000 },
         { n_instances = 99999, num_class = 37 }]
grid  = 1792
block = 256
atol  = 1e-6
*/
__global__ void softmax_prob_transform_kernel(size_t len, float_type *yp_data, int num_class, int n_instances) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < len; i += blockDim.x * gridDim.x) {
        float_type max = yp_data[i];
        for (int k = 1; k < num_class; ++k) {
            max = fmaxf(max, yp_data[k * n_instances + i]);
        }
        float_type sum = 0;
        for (int k = 0; k < num_class; ++k) {
            //-max to avoid numerical issue
            yp_data[k * n_instances + i] = expf(yp_data[k * n_instances + i] - max);
            sum += yp_data[k * n_instances + i];
        }
        for (int k = 0; k < num_class; ++k) {
            yp_data[k * n_instances + i] /= sum;
        }
    }
}

///p100 has 56 MPs, using 32*56 thread blocks
template<int NUM_BLOCK = 32 * 56, int BLOCK_SIZE = 256>
inline void device_loop_softmax_prob(int len, float_type *yp_data, int num_class, int n_instances) {
    if (len > 0) {
        softmax_prob_transform_kernel << < NUM_BLOCK, BLOCK_SIZE >> > (len, yp_data, num_class, n_instances);
        CUDA_CHECK(cudaGetLastError());
    }
}

// y: device scores [num_class, n_instances] (class-major), transformed in place into probabilities.
void softmax_prob_predict_transform(float_type *y, size_t y_size, int num_class) {
    auto yp_data = y;
    int n_instances = y_size / num_class;
    device_loop_softmax_prob(n_instances, yp_data, num_class, n_instances);
}
