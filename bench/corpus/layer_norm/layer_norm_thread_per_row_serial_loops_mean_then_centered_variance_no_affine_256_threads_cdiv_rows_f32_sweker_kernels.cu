// LayerNorm as SwekeR-463's kernels repo writes its first version (SwekeR-463/kernels, old_grind/day26/layernorm.cu
// layer_norm_kernel behind layer_norm(); a day-by-day CUDA learning log whose later days add an "optimized" block
// version): fp32, OUT OF PLACE, NO affine (no gamma / beta), one THREAD per row: each thread walks its whole row three
// times serially, a sum for the mean, then the centred sum of squares (two-pass variance, divided by feature_size,
// no bias correction), then y = (x - mean) * (1 / sqrtf(var + eps)); consecutive threads of a warp touch rows
// feature_size floats apart (uncoalesced), the naive starting point such logs begin with. 256 threads per block,
// grid ceil(batch_size / 256), argument order (input, output, batch_size, feature_size, epsilon), eps 1e-5.
// Changed: the host function allocated device buffers, copied the input, timed the kernel with events and copied
// back; it now takes device pointers and a stream. Fixed: the row offset idx * feature_size was an int product that
// overflows past 2^31 elements; it is computed in 64 bits. The later day27 block version was not used: its shared
// reduction writes shared_data[tid] with 2 floats of dynamic shared memory (out of bounds).
// Sizes: 8192 x 4096, decode 4 x 4096, tail 999 x 3001.
#include <cuda_runtime.h>

/* kerntune:
args  = ["input: in f32[batch * features]", "output: out f32[batch * features]", "batch_size: i32 = batch",
         "feature_size: i32 = features", "epsilon: f32 = 1e-5"]
sizes = [{ batch = 8192, features = 4096 }, { batch = 4, features = 4096 }, { batch = 999, features = 3001 }]
grid  = "cdiv(batch, 256)"
block = 256
*/
__global__ void layer_norm_kernel(const float* input, float* output, const int batch_size, const int feature_size,
                                  float epsilon) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // one row per thread

    if (idx < batch_size) {
        const float* x = input + (long long)idx * feature_size;
        float* y = output + (long long)idx * feature_size;

        // mean
        float mean = 0.0f;
        for (int i = 0; i < feature_size; ++i) {
            mean += x[i];
        }
        mean /= feature_size;

        // variance around the mean
        float variance = 0.0f;
        for (int i = 0; i < feature_size; ++i) {
            float d = x[i] - mean;
            variance += d * d;
        }
        variance /= feature_size;

        // normalize
        float inv_std = 1.0f / sqrtf(variance + epsilon);
        for (int i = 0; i < feature_size; ++i) {
            y[i] = (x[i] - mean) * inv_std;
        }
    }
}

// input, output: [batch_size, feature_size] on the device
void layer_norm(const float* d_input, float* d_output, int batch_size, int feature_size, float epsilon,
                cudaStream_t stream) {
    int threads_per_block = 256;
    int blocks_per_grid = (batch_size + threads_per_block - 1) / threads_per_block;
    layer_norm_kernel<<<blocks_per_grid, threads_per_block, 0, stream>>>(d_input, d_output, batch_size,
                                                                         feature_size, epsilon);
}
