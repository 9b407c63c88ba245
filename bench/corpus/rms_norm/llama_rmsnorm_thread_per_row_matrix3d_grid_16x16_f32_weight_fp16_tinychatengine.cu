// RMSNorm as MIT Han Lab's TinyChatEngine writes its general CUDA kernel (llm/src/ops/cuda/LlamaRMSNorm.cu,
// LlamaRMSNorm_cuda_kernel, the "general implementation" next to its FasterTransformer-derived block kernel), fp16
// activations with an fp32 weight:
//   x, output [bsz, sqlen, embed_dim] half, viewed through TinyChatEngine's Matrix3D<T> (m_data, m_dim_x, m_dim_y,
//   m_dim_z; element (i, j, k) at (i * m_dim_y + j) * m_dim_z + k), weight a Matrix3D<float> [1, 1, embed_dim]
//   ONE THREAD PER ROW: thread (i, j) of a 2-D launch owns row (batch i, token j) and walks all embed_dim values
//   serially twice: sum of squares in fp32, var /= embed_dim, rsqrtf(var + eps), then
//   out = half((x * rsqrt) * weight), one rounding per value; the (i < m_dim_x && j < m_dim_y) guard
//   2-D grid over (batch, token) with 16 x 16 thread blocks, as TinyChatEngine's Matrix3D kernels launch; default
//   stream; int indices
// TinyChatEngine passes the Matrix3D objects by value; here their fields are passed (data pointer and dims) and the
// views are rebuilt in the kernel, so that the arguments are plain pointers and ints. Its commented-out fp16
// variant is not written. The launcher is ours (TinyChatEngine's operator class builds the same launch from its
// members). No bug found.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

template <typename T>
class Matrix3D {
   public:
    __host__ __device__ Matrix3D(T *data, int dim_x, int dim_y, int dim_z)
        : m_data(data), m_dim_x(dim_x), m_dim_y(dim_y), m_dim_z(dim_z) {}

    __host__ __device__ T &operator()(int x, int y, int z) { return m_data[x * m_dim_y * m_dim_z + y * m_dim_z + z]; }

    __host__ __device__ const T &operator()(int x, int y, int z) const {
        return m_data[x * m_dim_y * m_dim_z + y * m_dim_z + z];
    }

    T *m_data;
    int m_dim_x, m_dim_y, m_dim_z;
};

static inline __device__ float to_float(half src) { return __half2float(src); }

static inline __device__ half to_half(float src) { return __float2half(src); }

/* kerntune:
args  = ["x_data: in f16[bsz * sqlen * embed_dim]", "weight_data: in f32[embed_dim]",
         "output_data: out f16[bsz * sqlen * embed_dim]", "dim_x: i32 = bsz", "dim_y: i32 = sqlen",
         "dim_z: i32 = embed_dim", "eps: f32 = 1e-6"]
sizes = [{ bsz = 4, sqlen = 2048, embed_dim = 4096 }, { bsz = 8, sqlen = 1, embed_dim = 4096 },
         { bsz = 3, sqlen = 333, embed_dim = 5120 }]
grid  = ["cdiv(bsz, 16)", "cdiv(sqlen, 16)"]
block = ["16", "16"]
*/
__global__ void LlamaRMSNorm_cuda_kernel(half *x_data, float *weight_data, half *output_data, int dim_x, int dim_y,
                                         int dim_z, float eps) {
    const Matrix3D<half> x(x_data, dim_x, dim_y, dim_z);
    const Matrix3D<float> weight(weight_data, 1, 1, dim_z);
    Matrix3D<half> output(output_data, dim_x, dim_y, dim_z);

    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;

    if (i < x.m_dim_x && j < x.m_dim_y) {
        // fp32 accumulation of the hidden states
        float var = 0.0f;

        for (int k = 0; k < x.m_dim_z; k++) {
            float value = to_float(x(i, j, k));
            var += value * value;
        }

        var /= static_cast<float>(x.m_dim_z);
        float variance = rsqrtf(var + eps);

        for (int k = 0; k < x.m_dim_z; k++) {
            float value = to_float(x(i, j, k));
            float fp_out = (value * variance) * weight(0, 0, k);

            output(i, j, k) = to_half(fp_out);
        }
    }
}

// x, output: [bsz, sqlen, embed_dim] half device buffers; weight: [embed_dim] float (TinyChatEngine keeps the norm
// weights in fp32). One thread per (batch, token) row.
void LlamaRMSNorm_cuda_forward(half *x, float *weight, half *output, int bsz, int sqlen, int embed_dim, float eps) {
    dim3 threadsPerBlock(16, 16);
    dim3 numBlocks((bsz + threadsPerBlock.x - 1) / threadsPerBlock.x,
                   (sqlen + threadsPerBlock.y - 1) / threadsPerBlock.y);
    LlamaRMSNorm_cuda_kernel<<<numBlocks, threadsPerBlock>>>(x, weight, output, bsz, sqlen, embed_dim, eps);
}
