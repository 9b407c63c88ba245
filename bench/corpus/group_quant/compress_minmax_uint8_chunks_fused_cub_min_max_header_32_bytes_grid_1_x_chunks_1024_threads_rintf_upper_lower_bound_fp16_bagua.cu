// MinMaxUInt8 gradient compression as Bagua writes it (BaguaSys/bagua, bagua-core-internal/kernels/bagua_kernels.cu:
// compress_float_to_uint8 behind compress_f16_to_uint8_host, used by the ByteGrad / low-precision decentralized
// algorithms before the NCCL exchange). A flat fp16 bucket of input_num_element values is cut into num_chunks chunks
// of chunk_size (one per rank); each chunk becomes chunk_offset = output_size / num_chunks bytes of the output:
// a 32-byte header holding the chunk's min and max stored as T (bytes 0 and sizeof(T)), then chunk_size uint8 codes
// at byte 32. Codes: scale = 255 / (max - min + eps) with eps = 1e-7, upper_bound = rintf(max * scale),
// lower_bound = upper_bound - 255, code = min(rintf(x * scale), upper_bound) - lower_bound (round half to even).
// 2-D grid as Bagua's: chunk = blockIdx.y * blockDim.y + threadIdx.y, elements strided by blockDim.x * gridDim.x,
// 1024 threads; T a template parameter (half instantiated), the __load_as_float / __store_float specializations.
// Changed: Bagua computes each chunk's min and max in separate launches (a host loop of cub::DeviceReduce::Min and
// ::Max per chunk writing the header) before this kernel reads them back; here they are fused into the kernel as a
// cub::BlockReduce<float, 1024> min and max over the chunk, so the grid is (1, num_chunks) (one block per chunk)
// instead of (DIVUP(chunk_size, 1024), num_chunks). Fixed: the last chunk is short when the bucket does not fill
// num_chunks * chunk_size, but the kernel read chunk_size values for every chunk (past the end of the input); the
// chunk length is now min(chunk_size, input_num_element - chunk * chunk_size). level - lower_bound can reach -1 when
// min * scale and max * scale round on opposite sides of a tie (an out-of-range float -> uint8 conversion): clamped
// at 0. The header's padding and the alignment bytes after the codes were left unwritten (garbage sent over NCCL):
// zeroed. Sizes: 256 chunks of 128 Ki (32 Mi values), 4 chunks over 16000 values (last 3712 long), 999999 values in
// 7 chunks of 142858.
#define THRUST_IGNORE_CUB_VERSION_CHECK

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdint.h>
#include <cfloat>
#include <cub/cub.cuh>

#define DIVUP(x, y) (((x)+(y)-1)/(y))
#define ALIGN_SIZE(size, align) (((size) + (align) - 1) / (align) * (align))

const float eps = 1e-7;

// the reduction functors, after cub's thread_operators
struct Max
{
    template <typename T>
    __device__ __forceinline__ T operator()(const T &a, const T &b) const
    {
        return ((b > a) ? b : a);
    }
};

struct Min
{
    template <typename T>
    __device__ __forceinline__ T operator()(const T &a, const T &b) const
    {
        return ((b < a) ? b : a);
    }
};

template<typename T>
__device__ inline uint8_t __minmax_uint8_compress(T f, float scale, float lower_bound, float upper_bound) {
    float level = rintf(f * scale);
    level = min(level, upper_bound);
    return fmaxf(level - lower_bound, 0.0f);
}

template<>
__device__ inline uint8_t __minmax_uint8_compress<half>(half f, float scale, float lower_bound, float upper_bound) {
    float level = rintf(__half2float(f) * scale);
    level = min(level, upper_bound);
    return fmaxf(level - lower_bound, 0.0f);
}

template<typename T>
__device__ inline float __load_as_float(const T * array) {
    return array[0];
}

template<>
__device__ inline float __load_as_float<half>(const half * array) {
    return __half2float(array[0]);
}

template<typename T>
__device__ inline void __store_float(T * array, float data) {
    array[0] = data;
}

template<>
__device__ inline void __store_float<half>(half * array, float data) {
    array[0] = __float2half(data);
}

/* kerntune:
args  = ["input: in f16[N]", "input_num_element: i32 = N", "chunk_size: i32 = CH",
         "chunk_offset: i32 = 32 + cdiv(CH, 32) * 32", "num_chunks: i32 = C",
         "output: out u8[C * (32 + cdiv(CH, 32) * 32)]", "output_size: u64 = C * (32 + cdiv(CH, 32) * 32)"]
sizes = [{ N = 33554432, CH = 131072, C = 256 }, { N = 16000, CH = 4096, C = 4 }, { N = 999999, CH = 142858, C = 7 }]
grid  = ["1", "C"]
block = 1024
template_args = ["half"]
*/
template<typename T>
__global__ void
compress_float_to_uint8(const T *input, int input_num_element, int chunk_size, int chunk_offset, int num_chunks,
                        uint8_t *output, size_t output_size) {
    typedef cub::BlockReduce<float, 1024> BlockReduce;
    __shared__ typename BlockReduce::TempStorage temp_storage;
    __shared__ float s_min, s_max;

    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int idy = blockIdx.y * blockDim.y + threadIdx.y;

    // the last chunk of the bucket may be short
    const T *chunk_input = input + (size_t) idy * chunk_size;
    int chunk_elem = min(chunk_size, input_num_element - idy * chunk_size);
    uint8_t *chunk_output = output + (size_t) idy * chunk_offset;

    // min and max of the chunk (cub::DeviceReduce::Min / ::Max in Bagua)
    float local_min = FLT_MAX;
    float local_max = -FLT_MAX;
    for (int i = idx; i < chunk_elem; i += blockDim.x * gridDim.x) {
        float f = __load_as_float(chunk_input + i);
        local_min = min(local_min, f);
        local_max = max(local_max, f);
    }
    float block_min = BlockReduce(temp_storage).Reduce(local_min, Min());
    __syncthreads();
    float block_max = BlockReduce(temp_storage).Reduce(local_max, Max());
    if (threadIdx.x == 0) {
        s_min = block_min;
        s_max = block_max;
    }
    __syncthreads();
    const float min_ = s_min;
    const float max_ = s_max;

    float scale = 255.0 / (max_ - min_ + eps);
    float upper_bound = rintf(max_ * scale);
    float lower_bound = upper_bound - 255.0;
    for (int i = idx; i < chunk_elem; i += blockDim.x * gridDim.x) {
        chunk_output[32 + i] = __minmax_uint8_compress(chunk_input[i], scale, lower_bound, upper_bound);
    }
    // alignment bytes after the codes
    for (int i = 32 + chunk_elem + idx; i < chunk_offset; i += blockDim.x * gridDim.x) {
        chunk_output[i] = 0;
    }

    if (idx == 0) {
        // write max min to output buffer
        __store_float(reinterpret_cast<T *>(chunk_output), min_);
        __store_float(reinterpret_cast<T *>(chunk_output + sizeof(T)), max_);
    } else if (idx < 32 - 2 * (int) sizeof(T) + 1) {
        chunk_output[2 * sizeof(T) + idx - 1] = 0;  // header padding
    }
}

template<typename T>
void compress_float_to_uint8_host(const T *input, int input_num_element, int chunk_size, int num_chunks,
                                  uint8_t *output, size_t output_size, cudaStream_t stream) {
    int chunk_offset = output_size / num_chunks;
    if (num_chunks <= 0 || (num_chunks - 1) * chunk_size >= input_num_element ||
        chunk_offset < 32 + ALIGN_SIZE(chunk_size, 32)) {
        fprintf(stderr, "compress_float_to_uint8: bad chunking\n");
        return;
    }
    dim3 num_blocks(1, num_chunks);
    compress_float_to_uint8<<<num_blocks, 1024, 0, stream>>>(input, input_num_element, chunk_size, chunk_offset,
                                                           num_chunks, output, output_size);
}

extern "C" {
// output_size = num_chunks * (ALIGN_SIZE(chunk_size, 32) + ALIGN_SIZE(2 * sizeof(half), 32)), as Bagua allocates it
void compress_f16_to_uint8_host(half *input, int input_num_element, int chunk_size, int num_chunks, uint8_t *output,
                                size_t output_size, cudaStream_t stream) {
    compress_float_to_uint8_host<half>(input, input_num_element, chunk_size, num_chunks, output, output_size, stream);
}
}
