// SwiGLU forward in the style of IBM's cute-kernels (mayank31398/cute-kernels, formerly kernel-hyperdrive;
// cute_kernels/kernels/swiglu/cuda_implementation/kernels_forward.cu, _swiglu_forward_cuda_kernel<scalar_t, vector_t>
// behind swiglu_forward_cuda, the CUDA path of its swiglu op for training and inference), bf16:
//   output = up * gate * sigmoid(gate), gate and up TWO SEPARATE tensors of the same shape (argument order gate, up,
//   output, num_elements), treated as one flat array of num_elements values (no rows)
//   each thread one 16-byte vector: vector_t = fp32_4 (a float4) for every dtype, its 4 fp32 words reinterpreted as
//   4 pairs of 16-bit values (dtype::reinterpret_32_bits_as_2x16), upcast to fp32_2, math in fp32 with
//   sigmoid(x) = 1 / (1 + expf(-x)), ONE rounding per value at the downcast, the 4 words stored as one fp32_4
//   the tail (num_elements % 8 values past the last whole vector) done by the first warp of the grid, one value per
//   lane (thread_id < WARP_SIZE), on top of its vector
//   flat grid cdiv(num_elements, BLOCK_SIZE * 8), BLOCK_SIZE a launcher argument (cute-kernels' default 1024),
//   64-bit thread id (get_global_thread_id), default stream
// The DType<> helpers and fp32_2 / fp32_4 aliases of cute-kernels' include/dtypes are written out for bf16 and fp32;
// the AT_DISPATCH over torch dtypes becomes a plain launcher for bf16 pointers; spec = <__nv_bfloat16, fp32_4>.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

#define WARP_SIZE 32

using fp32 = float;
using fp32_2 = float2;
using fp32_4 = float4;
using bf16 = __nv_bfloat16;
using bf16_2 = __nv_bfloat162;

inline __device__ int64_t get_global_thread_id() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }

template <typename input_T, typename output_T>
inline __device__ output_T sigmoid(const input_T &x) {
    return (output_T)(1.0f / (1.0f + expf(-x)));
}

template <typename T>
struct DType {};

template <>
struct DType<fp32> {
    inline __device__ static fp32_2 make2(const fp32 &x, const fp32 &y) { return make_float2(x, y); }
    inline __device__ static fp32_4 make4(const fp32 *values) {
        return make_float4(values[0], values[1], values[2], values[3]);
    }
    inline __device__ static fp32 upcast(const fp32 &value) { return value; }
    inline __device__ static fp32 downcast(const fp32 &value) { return value; }
};

template <>
struct DType<bf16> {
    inline __device__ static fp32 upcast(const bf16 &value) { return __bfloat162float(value); }
    inline __device__ static fp32_2 upcast(const bf16_2 &value) { return __bfloat1622float2(value); }
    inline __device__ static bf16 downcast(const fp32 &value) { return __float2bfloat16(value); }
    inline __device__ static bf16_2 downcast(const fp32_2 &value) { return __float22bfloat162_rn(value); }

    inline __device__ static bf16_2 reinterpret_32_bits_as_2x16(const fp32 &value) {
        const uint32_t bits = __float_as_uint(value);
        return *reinterpret_cast<const bf16_2 *>(&bits);
    }
    inline __device__ static fp32 reinterpret_2x16_as_32_bits(const bf16_2 &value) {
        return __uint_as_float(*reinterpret_cast<const uint32_t *>(&value));
    }
};

/* kerntune:
args  = ["gate: in bf16[tokens * d]", "up: in bf16[tokens * d]", "output: out bf16[tokens * d]",
         "num_elements: i64 = tokens * d"]
sizes = [{ tokens = 8192, d = 14336 }, { tokens = 4, d = 14336 }, { tokens = 37, d = 11007 }]
grid  = "cdiv(tokens * d, 1024 * 8)"
block = 1024
template_args = ["__nv_bfloat16", "fp32_4"]
*/
template <typename scalar_t, typename vector_t>
__global__ void _swiglu_forward_cuda_kernel(const scalar_t *gate,
                                            const scalar_t *up,
                                            scalar_t *output,
                                            const int64_t num_elements) {
    constexpr int vector_instruction_width = sizeof(vector_t) / sizeof(scalar_t);
    static_assert(vector_instruction_width == 4 || vector_instruction_width == 8);

    const int64_t thread_id = get_global_thread_id();
    using dtype = DType<scalar_t>;

    int64_t end = (thread_id + 1) * vector_instruction_width - 1;  // the vector's last element, inclusive

    if (end < num_elements) {
        vector_t *output_vec = (vector_t *)output;
        const fp32 *gate_vec = (const fp32 *)&((const vector_t *)gate)[thread_id];
        const fp32 *up_vec = (const fp32 *)&((const vector_t *)up)[thread_id];
        fp32 output_buffer[4];

#pragma unroll
        for (int i = 0; i < 4; i++) {
            if constexpr (std::is_same_v<scalar_t, fp32>) {
                output_buffer[i] = up_vec[i] * gate_vec[i] * sigmoid<fp32, fp32>(gate_vec[i]);
            } else {
                fp32_2 gate_upcast = dtype::upcast(dtype::reinterpret_32_bits_as_2x16(gate_vec[i]));
                fp32_2 up_upcast = dtype::upcast(dtype::reinterpret_32_bits_as_2x16(up_vec[i]));

                gate_upcast = DType<fp32>::make2(up_upcast.x * gate_upcast.x * sigmoid<fp32, fp32>(gate_upcast.x),
                                                 up_upcast.y * gate_upcast.y * sigmoid<fp32, fp32>(gate_upcast.y));

                output_buffer[i] = dtype::reinterpret_2x16_as_32_bits(dtype::downcast(gate_upcast));
            }
        }

        output_vec[thread_id] = DType<fp32>::make4(output_buffer);
    }

    // the first warp also does the elements past the last whole vector, one each
    if (thread_id < WARP_SIZE) {
        end = (num_elements / vector_instruction_width) * vector_instruction_width + thread_id;
        if (end < num_elements) {
            fp32 gate_upcast = dtype::upcast(gate[end]);
            gate_upcast = dtype::upcast(up[end]) * gate_upcast * sigmoid<fp32, fp32>(gate_upcast);
            output[end] = dtype::downcast(gate_upcast);
        }
    }
}

// gate, up, output: device pointers to num_elements contiguous bf16 values each (16-byte aligned).
void swiglu_forward_cuda(const bf16 *gate, const bf16 *up, bf16 *output, const int64_t num_elements,
                         const int BLOCK_SIZE) {
    const int log_vector_instruction_width = 3;  // 8 bf16 per fp32_4
    const int64_t num_elements_per_block = (int64_t)BLOCK_SIZE << log_vector_instruction_width;
    const int NUM_BLOCKS = (num_elements + num_elements_per_block - 1) / num_elements_per_block;

    _swiglu_forward_cuda_kernel<bf16, fp32_4><<<NUM_BLOCKS, BLOCK_SIZE>>>(gate, up, output, num_elements);
}

// fp32 instance (4 floats per vector), as the dispatch also builds
void swiglu_forward_cuda(const fp32 *gate, const fp32 *up, fp32 *output, const int64_t num_elements,
                         const int BLOCK_SIZE) {
    const int log_vector_instruction_width = 2;
    const int64_t num_elements_per_block = (int64_t)BLOCK_SIZE << log_vector_instruction_width;
    const int NUM_BLOCKS = (num_elements + num_elements_per_block - 1) / num_elements_per_block;

    _swiglu_forward_cuda_kernel<fp32, fp32_4><<<NUM_BLOCKS, BLOCK_SIZE>>>(gate, up, output, num_elements);
}
