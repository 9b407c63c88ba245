// Gated activation as ExLlamaV3 writes it (exllamav3_ext/activation.cu with activation_kernels.cuh), the fp32-input
// path: the gate x and the up projection y are two SEPARATE tensors (the outputs of two GEMMs that ExLlamaV3 asks
// to produce in fp32), both [rows, d], and the result z is fp16:
//   z = half2(act(x) * y)      act = GELU (tanh approximation, Gemma's gelu_mul), SiLU, ReLU^2 or ReLU
// ExLlamaV3's conventions: one kernel template over an int activation_type chosen with `if constexpr` (ACT_SILU,
// ACT_GELU, ... as #defines), __launch_bounds__(NUM_THREADS) with NUM_THREADS a #define also used as the block
// index stride, one float2 PAIR per thread over the flat element count (idx < numel / 2, numel = x.numel(), even),
// size_t numel, CEIL_DIVIDE(numel, 2 * NUM_THREADS) blocks; the tanh is tanh_opt (one tanh.approx.f32 PTX
// instruction) and the GELU formula keeps the library's `1.0` double literal; an optional act_limit (0 = off)
// clamps y to +-limit and act(x) from above; the fp32 result is converted to half2 once and clamped to the finite
// fp16 range (+-65504). Launched per activation by small host functions (silu_mul, gelu_mul) on the caller's
// stream.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstddef>

#define NUM_THREADS 256
#define ACT_SILU 0
#define ACT_GELU 1
#define ACT_RELU2 2
#define ACT_RELU 4

#define CEIL_DIVIDE(x, size) (((x) + (size) - 1) / (size))

__inline__ __device__ float tanh_opt(float x)
{
    float r;
    asm("tanh.approx.f32 %0,%1; \n\t" : "=f"(r) : "f"(x));
    return r;
}

__device__ inline half2 clamp_half2_to_finite(half2 v)
{
    const half2 max_h2 = __float2half2_rn(65504.0f);
    const half2 min_h2 = __float2half2_rn(-65504.0f);
    return __hmax2(__hmin2(v, max_h2), min_h2);
}

__device__ __forceinline__ float _silu(float x)
{
    float e = __expf(-x);
    float recip = __fdividef(1.0f, 1.0f + e);
    return x * recip;
}

__device__ __forceinline__ float _gelu(float x)
{
    const float c = 0.797884560803f;  // sqrt(2 / pi)
    float tanh_arg = c * (x + 0.044715f * x * x * x);
    x = 0.5f * x * (1.0 + tanh_opt(tanh_arg));
    return x;
}

__device__ __forceinline__ float _relu2(float x)
{
    x = fmaxf(0.0f, x);
    return x * x;
}

__device__ __forceinline__ float _relu(float x)
{
    return fmaxf(0.0f, x);
}

/* kerntune:
args  = ["x: in f32[rows * d]", "y: in f32[rows * d]", "z: out f16[rows * d]", "act_limit: f32 = 0.0",
         "numel: u64 = rows * d"]
sizes = [{ rows = 4096, d = 14336 }, { rows = 4, d = 14336 }, { rows = 1001, d = 2734 }]
grid  = "cdiv(rows * d, 2 * 256)"
block = 256
template_args = ["ACT_GELU"]
*/
template <int activation_type>
__global__ __launch_bounds__(NUM_THREADS)
void act_mul_kernel_f
(
    const float* __restrict__ x,
    const float* __restrict__ y,
    half* __restrict__ z,
    const float act_limit,
    const size_t numel
)
{
    size_t idx = (blockIdx.x * NUM_THREADS + threadIdx.x);
    if (idx >= numel / 2) return;

    float2 x2 = ((const float2*) x)[idx];
    float2 y2 = ((const float2*) y)[idx];

    if constexpr (activation_type == ACT_SILU)
    {
        x2.x = _silu(x2.x);
        x2.y = _silu(x2.y);
    }
    else if constexpr (activation_type == ACT_GELU)
    {
        x2.x = _gelu(x2.x);
        x2.y = _gelu(x2.y);
    }
    else if constexpr (activation_type == ACT_RELU2)
    {
        x2.x = _relu2(x2.x);
        x2.y = _relu2(x2.y);
    }
    else if constexpr (activation_type == ACT_RELU)
    {
        x2.x = _relu(x2.x);
        x2.y = _relu(x2.y);
    }

    if (act_limit != 0.0f)
    {
        if (y2.x < -act_limit) y2.x = -act_limit;
        if (y2.y < -act_limit) y2.y = -act_limit;
        if (y2.x > act_limit) y2.x = act_limit;
        if (y2.y > act_limit) y2.y = act_limit;
        if (x2.x > act_limit) x2.x = act_limit;
        if (x2.y > act_limit) x2.y = act_limit;
    }

    x2.x *= y2.x;
    x2.y *= y2.y;
    half2 r = __float22half2_rn(x2);
    r = clamp_half2_to_finite(r);
    ((half2*) z)[idx] = r;
}

// silu(x) * y -> z and gelu(x) * y -> z for fp32 x, y [rows, d] and fp16 z [rows, d]; device pointers, numel even.

void silu_mul(const float* x, const float* y, half* z, size_t numel, float act_limit, cudaStream_t stream)
{
    size_t blocks = CEIL_DIVIDE(numel, 2 * NUM_THREADS);
    act_mul_kernel_f<ACT_SILU><<<blocks, NUM_THREADS, 0, stream>>>(x, y, z, act_limit, numel);
}

void gelu_mul(const float* x, const float* y, half* z, size_t numel, float act_limit, cudaStream_t stream)
{
    size_t blocks = CEIL_DIVIDE(numel, 2 * NUM_THREADS);
    act_mul_kernel_f<ACT_GELU><<<blocks, NUM_THREADS, 0, stream>>>(x, y, z, act_limit, numel);
}
