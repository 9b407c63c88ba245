// The gated activation of the feed-forward block as Zhihu's ZhiLight serving engine writes it
// (src/nn/feedforward/ff_kernel.cu, gate_fuse, on its bmengine core): the gate and up projections come out of one
// fused GEMM as in = [seq_len, 2 * dim_ff] with the GATE half first, and
//   out[t, i] = T(act(float(in[t, i])) * float(in[t, dim_ff + i]))        act = silu or gelu (tanh form)
// in fp32 with one rounding at the store. ZhiLight's conventions: a KERNEL_-prefixed static templated __global__
// (ZhiLight's gate_fuse itself is named through its BM_KERNEL(name) token-pasting macro, BMEngine_KERNEL_gate_fuse;
// kerntune's parser does not read a kernel name pasted by a macro, which the corpus's parse test requires, so this
// file uses the KERNEL_name spelling of ZhiLight's newer kernels: a finding about kerntune, noted here), the
// activation chosen AT RUN TIME by an int act_type compared with #define'd GELU / SILU codes (an unknown code
// asserts on thread 0), one token per blockIdx.x and the
// columns spread over blockIdx.Z: gridDim (seq_len, 1, round_up(dim_ff, 1024) / 1024), blockDim 1024, one element
// per thread behind an i < dim_ff guard, the token offset kept as an unsigned int; the launcher maps the model
// config's act_fn_type string to the code and dispatches on the tensor dtype through a BM_DTYPE_DISPATCH_FLOAT
// switch macro (here written over raw device pointers and a dtype enum instead of bmengine tensors).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <assert.h>
#include <cstddef>
#include <stdexcept>
#include <string>

template <typename T, typename Tb>
inline T round_up(T m, Tb d) {
    return ((m + T(d) - 1) / T(d)) * T(d);
}

namespace bmengine {
namespace core {
enum class DataType { kDouble, kFloat, kHalf, kInt8, kInt16, kInt32, kBFloat16 };
}  // namespace core
}  // namespace bmengine

#define BM_DTYPE_DISPATCH_FLOAT(dtype, ...)                                         \
    do {                                                                            \
        switch (dtype) {                                                            \
            case bmengine::core::DataType::kFloat: {                                \
                typedef float scalar_t;                                             \
                { __VA_ARGS__ }                                                     \
                break;                                                              \
            }                                                                       \
            case bmengine::core::DataType::kHalf: {                                 \
                typedef half scalar_t;                                              \
                { __VA_ARGS__ }                                                     \
                break;                                                              \
            }                                                                       \
            case bmengine::core::DataType::kBFloat16: {                             \
                typedef nv_bfloat16 scalar_t;                                       \
                { __VA_ARGS__ }                                                     \
                break;                                                              \
            }                                                                       \
            default: throw std::invalid_argument("BM_DTYPE_DISPATCH_FLOAT: dtype"); \
        }                                                                           \
    } while (0)

namespace nn {

// nn/functions/activation.cuh
static inline __device__ float gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
static inline __device__ float silu(float x) {
    return x / (1.0f + expf(-x));
}

#define GELU 1
#define SILU 2

/* kerntune:
args  = ["in: in bf16[seq_len * 2 * dim_ff]", "out: out bf16[seq_len * dim_ff]", "dim_ff: i32 = dim_ff",
         "act_type: i32 = 2"]
sizes = [{ seq_len = 4096, dim_ff = 14336 }, { seq_len = 4, dim_ff = 11008 }, { seq_len = 37, dim_ff = 1409 }]
grid  = ["seq_len", "1", "cdiv(dim_ff, 1024)"]
block = 1024
template_args = ["nv_bfloat16"]
*/
// gridDim(seq_len, 1, dim_ff / 1024) blockDim(1024)
template <typename T>
static __global__ void KERNEL_gate_fuse(
    const T* in,  // (seq_len, 2 * dim_ff)
    T* out,       // (seq_len, dim_ff)
    int dim_ff,
    int act_type) {
    unsigned int offset = blockIdx.x * dim_ff;
    int i = blockIdx.z * blockDim.x + threadIdx.x;
    if (i < dim_ff) {
        float x = in[offset * 2 + i];
        float y = in[offset * 2 + dim_ff + i];
        if (act_type == GELU) {
            x = gelu(x);
        } else if (act_type == SILU) {
            x = silu(x);
        } else if (threadIdx.x == 0) {
            assert(false);
        }
        out[offset + i] = T(x * y);
    }
}

// input (seq_len, 2 * dim_ff) -> out (seq_len, dim_ff); device pointers of `dtype`.
void gate_fuse(const void* input, void* out, bmengine::core::DataType dtype, size_t seq_len, size_t dim_ff,
               const std::string& act_fn_type, cudaStream_t stream) {
    int act_type;
    if (act_fn_type == "gelu")
        act_type = GELU;
    else if (act_fn_type == "silu")
        act_type = SILU;
    else
        throw std::logic_error(act_fn_type + " activation is not supported");

    dim3 gridDim(seq_len, 1, round_up(dim_ff, 1024) / 1024);

    BM_DTYPE_DISPATCH_FLOAT(dtype, {
        KERNEL_gate_fuse<scalar_t><<<gridDim, 1024, 0, stream>>>(
            static_cast<const scalar_t*>(input), static_cast<scalar_t*>(out), dim_ff, act_type);
    });
}

}  // namespace nn
