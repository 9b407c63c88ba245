// Per-token (row-wise) symmetric int8 quantization as OpenPPL's LLM kernels write it for their i8i8 (SmoothQuant-
// style W8A8) linear layers (ppl.llm.kernel.cuda, src/ppl/kernel/llm/cuda/pmx/i8i8/quantize.cu,
// minmax_quantize_fp16_kernel with pmx/quant_utils.h):
//   absmax = max |x| over the row (the token's quant_dim channels)
//   scale  = max(absmax / INT8_QLEVEL, QTHRESHOLD)        INT8_QLEVEL = 127, QTHRESHOLD = 1e-7
//   q      = (int8_t)__float2int_rn(x / scale)            a true division, round to nearest even
//   scale_output[row] = half(scale * up_scale)            the dequantization scale stored in fp16, times the
//                                                         caller's up_scale "for precision" (1 here)
// PPL's conventions: the nested namespaces ppl::kernel::llm::cuda::pmx::i8i8, fp32_t, argument order (input,
// batch, quant_dim, up_scale, output, scale_output) with int64_t sizes, one token per block of TPB = 256 threads
// (a constexpr in the launcher, a template parameter of the kernel), 16-byte copy<VPT> helper moves: 8 halves a
// thread for the max, then 16 halves (two copies) to 16 int8 (one copy) a thread for the quantization, so
// quant_dim must be a multiple of 16; block_reduce_max<WPT> (xor shuffles, a __shared__ float[WPT], warp
// maxima re-reduced by every warp, lane 0 broadcast); the input read twice from global memory; the scale written
// by thread 0 after the row. (PPL's kernel is also templated on the output layout, COL32 variants for its int8
// GEMM; the row-major one is kept here.)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace ppl { namespace common {
typedef uint32_t RetCode;
enum { RC_SUCCESS = 0, RC_UNSUPPORTED = 1 };
}}

namespace ppl { namespace kernel { namespace llm { namespace cuda { namespace pmx {

typedef float fp32_t;

const fp32_t  QTHRESHOLD  = 1e-7;
const int32_t INT8_QLEVEL = 127;

// a BYTES-wide move between global memory and registers in one access
template<int32_t BYTES>
__device__ inline void copy(const void* src, void* dst) {
    static_assert(BYTES == 16 || BYTES == 8 || BYTES == 4, "copy: 4, 8 or 16 bytes");
    if (BYTES == 16) {
        *reinterpret_cast<int4*>(dst) = *reinterpret_cast<const int4*>(src);
    } else if (BYTES == 8) {
        *reinterpret_cast<int2*>(dst) = *reinterpret_cast<const int2*>(src);
    } else {
        *reinterpret_cast<int32_t*>(dst) = *reinterpret_cast<const int32_t*>(src);
    }
}

template<int32_t WRAPS_PER_THREAD_BLOCK>
inline __device__
fp32_t block_reduce_max(
    const fp32_t reducing,
    fp32_t *shared_mem
) {
    constexpr int32_t WRAP_SIZE = 32;
    const int32_t lane_id = threadIdx.x % WRAP_SIZE;
    const int32_t wrap_id = threadIdx.x / WRAP_SIZE;

    fp32_t reduced = reducing;

    // step 1. reduction in warp
#pragma unroll
    for (int32_t mask = WRAP_SIZE / 2; mask >= 1; mask /= 2) {
        reduced = max(__shfl_xor_sync(uint32_t(-1), reduced, mask), reduced);
    }

    // step 2. reduction in thread block (via shared mem)
    if (lane_id == 0) shared_mem[wrap_id] = reduced;
    __syncthreads();

    if (lane_id < WRAPS_PER_THREAD_BLOCK) {
        reduced = shared_mem[lane_id];
    }

#pragma unroll
    for (int32_t mask = WRAP_SIZE / 2; mask >= 1; mask /= 2) {
        reduced = max(__shfl_xor_sync(uint32_t(-1), reduced, mask), reduced);
    }

    // broadcast to the other lanes
    return __shfl_sync(uint32_t(-1), reduced, 0);
}

__device__ inline
fp32_t min_max_range_to_scale(
    const fp32_t range,
    const int32_t quant_level
) {
    return max(range / quant_level, QTHRESHOLD);
}

namespace i8i8 {

/* kerntune:
args  = ["input: in f16[batch * quant_dim]", "batch: i64 = batch", "quant_dim: i64 = quant_dim",
         "up_scale: f32 = 1.0", "output: out i8[batch * quant_dim]", "scale_output: out f16[batch]"]
sizes = [{ batch = 8192, quant_dim = 4096 }, { batch = 4, quant_dim = 11008 }, { batch = 1001, quant_dim = 5136 }]
grid  = "batch"
block = 256
template_args = ["256"]
*/
template<int32_t TPB>
__global__
void minmax_quantize_fp16_kernel(
    const half* input, // [batch, quant_dim]
    const int64_t batch,
    const int64_t quant_dim,
    const float up_scale, // scale[i] = scale_val * up_scale for precision
    int8_t* output, // [batch, quant_dim]
    half* scale_output // [batch]
)
{
    constexpr int32_t VPT       = 16;
    constexpr int32_t V8PT      = VPT / sizeof(int8_t);
    constexpr int32_t V16PT     = VPT / sizeof(half);
    constexpr int32_t WPT       = TPB / 32; // warps per thread block
    const int64_t batch_id      = blockIdx.x;
    const int64_t batch_offset  = batch_id * quant_dim;
    __shared__ float red_smem[WPT];

    float local_max = 0.0f;
    for (int64_t idx = threadIdx.x * V16PT; idx < quant_dim; idx += TPB * V16PT) {
        half local_in[V16PT];
        copy<VPT>(&input[batch_offset + idx], local_in);

        #pragma unroll
        for (int32_t vidx = 0; vidx < V16PT; vidx += 1) {
            float value = __half2float(local_in[vidx]);
            local_max = fmax(fabs(value), local_max);
        }
    }
    local_max = block_reduce_max<WPT>(local_max, red_smem);
    float scale = min_max_range_to_scale(local_max, INT8_QLEVEL);

    for (int64_t idx = threadIdx.x * V8PT; idx < quant_dim; idx += TPB * V8PT) {
        half local_in[V8PT];
        int8_t local_out[V8PT];
        copy<VPT>(&input[batch_offset + idx], local_in);
        copy<VPT>(&input[batch_offset + idx + V16PT], &local_in[V16PT]);

        #pragma unroll
        for (int32_t vidx = 0; vidx < V8PT; vidx += 1) {
            float fp_value = __half2float(local_in[vidx]);
            local_out[vidx] = (int8_t)__float2int_rn(fp_value / scale);
        }
        copy<VPT>(local_out, &output[batch_offset + idx]);
    }

    if (threadIdx.x == 0) {
        scale_output[batch_id] = __float2half(scale * up_scale);
    }
}

ppl::common::RetCode minmax_quantize_fp16(
    cudaStream_t stream,
    const void* input, // fp16, [batch, quant_dim]
    const int64_t batch,
    const int64_t quant_dim,
    const float up_scale, // scale[i] = scale * up_scale for precision
    void* quantized, // int8, [batch, quant_dim]
    void* scale // fp16, [batch]
)
{
    if (quant_dim % 16 != 0) {
        return ppl::common::RC_UNSUPPORTED;
    }
    constexpr int32_t TPB = 256;
    minmax_quantize_fp16_kernel<TPB>
    <<<batch, TPB, 0, stream>>>(
        (const half*)input, batch, quant_dim,
        up_scale, (int8_t*)quantized, (half*)scale
    );
    return ppl::common::RC_SUCCESS;
}

} // namespace i8i8

}}}}}
