// LayerNorm forward in the style of OpenAI blocksparse (src/layer_norm_nc_op_gpu.cu: layer_norm_NC<T, V, THREADS>
// behind LayerNormForward_NC, the TensorFlow op of blocksparse.norms.layer_norm used by its transformers), fp16
// activations ("ehalf") with fp32 gain and bias:
//   X, Y [N, K] (NC layout: one row of K features per example), G, B [K] float, Mean, Rstd [N] float outputs
//   (saved for the backward pass), relu flag fused after the affine
//   one block per row (grid N), THREADS a template parameter: 256 when the row has >= 256 vectors, else 32
//   vectorized when K % 4 == 0: X and Y read as ehalf4 (4 halves in a uint2, loaded and converted to float4), G and
//   B as float4, K passed in vectors (K / 4) but rcpK = 1 / K of the scalar count; unroll 4
//   SINGLE PASS over X for mean and variance: per-thread sums of x and x * x (as float4, collapsed by ew_sum) times
//   rcpK, xor-shuffle warp reduction of the float2 (mean, mean of squares), first lanes of each warp to
//   __shared__ float2 Share[32], the first warp reduces THREADS / 32 values (xor offsets THREADS / 64 .. 1), result
//   broadcast through Share[0]; var = E[x^2] - E[x]^2, rstd = rsqrtf(var + epsilon) (eps inside the rsqrt)
//   second pass re-reads X: y = (x - mean) * rstd * g + b in fp32, optional relu, one rounding to fp16 at the store
//   uint indices, add_ptr_u / load / store / ew_* helpers of blocksparse's ew_op_gpu.h written out here for
//   float4 / ehalf4 / float / ehalf only; CUstream and the unused SMs argument kept in the launcher
// The spec is the vector instantiation <ehalf4, float4, 256> (every size set has K % 4 == 0 and K / 4 >= 256). The
// first warp reads all 32 Share slots though only THREADS / 32 were written; lanes past them hold garbage but the
// xor offsets below THREADS / 32 never carry it into lane 0, whose value is broadcast, so results are unaffected:
// kept as is. No bug found.
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

typedef unsigned int uint;

struct ehalf {
  __device__ __forceinline__ ehalf() {}
  unsigned short x;
};
struct ehalf4 {
  __device__ __forceinline__ ehalf4() {}
  uint2 x;
};

template <typename T>
__device__ __forceinline__ const T* add_ptr_u(const T* src, uint offset) { return src + offset; }
template <typename T>
__device__ __forceinline__ T* add_ptr_u(T* src, uint offset) { return src + offset; }

__device__ __forceinline__ float to_float(unsigned short h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ unsigned short to_ehalf(float f) { return __half_as_ushort(__float2half_rn(f)); }

__device__ __forceinline__ float load(const ehalf* in) { return to_float(in->x); }
__device__ __forceinline__ float4 load(const ehalf4* in) {
  uint2 v = in->x;
  float4 r;
  r.x = to_float((unsigned short)(v.x & 0xffff));
  r.y = to_float((unsigned short)(v.x >> 16));
  r.z = to_float((unsigned short)(v.y & 0xffff));
  r.w = to_float((unsigned short)(v.y >> 16));
  return r;
}
__device__ __forceinline__ float load(const float* in, int i) { return in[i]; }
__device__ __forceinline__ float4 load(const float4* in, int i) { return in[i]; }

__device__ __forceinline__ void store(ehalf* out, float v) { out->x = to_ehalf(v); }
__device__ __forceinline__ void store(ehalf4* out, float4 v) {
  uint2 r;
  r.x = (uint)to_ehalf(v.x) | ((uint)to_ehalf(v.y) << 16);
  r.y = (uint)to_ehalf(v.z) | ((uint)to_ehalf(v.w) << 16);
  out->x = r;
}

__device__ __forceinline__ void ew_zero(float& a) { a = 0.0f; }
__device__ __forceinline__ void ew_zero(float4& a) { a = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ float ew_add(float a, float b) { return a + b; }
__device__ __forceinline__ float4 ew_add(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ float ew_sub(float a, float b) { return a - b; }
__device__ __forceinline__ float4 ew_sub(float4 a, float b) { return make_float4(a.x - b, a.y - b, a.z - b, a.w - b); }
__device__ __forceinline__ float ew_mul(float a, float b) { return a * b; }
__device__ __forceinline__ float4 ew_mul(float4 a, float b) { return make_float4(a.x * b, a.y * b, a.z * b, a.w * b); }
__device__ __forceinline__ float4 ew_mul(float4 a, float4 b) {
  return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);
}
__device__ __forceinline__ float ew_sqr(float a) { return a * a; }
__device__ __forceinline__ float4 ew_sqr(float4 a) { return make_float4(a.x * a.x, a.y * a.y, a.z * a.z, a.w * a.w); }
__device__ __forceinline__ float ew_sum(float a) { return a; }
__device__ __forceinline__ float ew_sum(float4 a) { return a.x + a.y + a.z + a.w; }
__device__ __forceinline__ float ew_relu(float a) { return a > 0.0f ? a : 0.0f; }
__device__ __forceinline__ float4 ew_relu(float4 a) {
  return make_float4(ew_relu(a.x), ew_relu(a.y), ew_relu(a.z), ew_relu(a.w));
}
__device__ __forceinline__ float shfl_xor(float var, int laneMask) {
  return __shfl_xor_sync(0xffffffff, var, laneMask);
}

// xmean = x - mean(x, axis=1)
// xvar  = var(x, axis=1)
// xstdr = rcp(sqrt(xvar + epsilon))
// xhat  = xmean * xstdr
// y     = xhat*g + b
/* kerntune:
args  = ["Y: out f16[N * K]", "Mean: out f32[N]", "Rstd: out f32[N]", "X: in f16[N * K]", "G: in f32[K]",
         "B: in f32[K]", "epsilon: f32 = 1e-5", "K: u32 = K / 4", "rcpK: f32 = 1.0 / K", "relu: i32 = 0"]
sizes = [{ N = 8192, K = 4096 }, { N = 8, K = 5120 }, { N = 1001, K = 2500 }]
grid  = "N"
block = 256
template_args = ["ehalf4", "float4", "256"]
*/
template <typename T, typename V, int THREADS>
__global__ void __launch_bounds__(THREADS) layer_norm_NC(
              T*              Y,
          float*              Mean,
          float*              Rstd,
    const     T* __restrict__ X,
    const     V* __restrict__ G,
    const     V* __restrict__ B,
    float epsilon, uint K, float rcpK, int relu)
{
    uint tid = threadIdx.x;
    uint n   = blockIdx.x;

    uint offset = n*K + tid;

    // mean and mean of squares in one pass: var(x) == mean(x**2) - mean(x)**2
    V v_mean1, v_mean2;
    ew_zero(v_mean1);
    ew_zero(v_mean2);
    #pragma unroll 4
    for (uint k = tid, offsetX = offset; k < K; k += THREADS, offsetX += THREADS)
    {
        V x = load(add_ptr_u(X, offsetX));
        v_mean1 = ew_add(v_mean1, x);
        v_mean2 = ew_add(v_mean2, ew_sqr(x));
    }
    float2 mean;
    mean.x = ew_sum(v_mean1) * rcpK;
    mean.y = ew_sum(v_mean2) * rcpK;

    // warp
    for (int i = 16; i > 0; i >>= 1)
    {
        mean.x += shfl_xor(mean.x, i);
        mean.y += shfl_xor(mean.y, i);
    }
    // across warps through shared memory
    if (THREADS > 32)
    {
        __shared__ float2 Share[32];

        if ((tid & 31) == 0)
            Share[tid/32] = mean;

        __syncthreads();

        if (tid < 32)
        {
            mean = Share[tid];

            for (int i = THREADS/64; i > 0; i >>= 1)
            {
                mean.x += shfl_xor(mean.x, i);
                mean.y += shfl_xor(mean.y, i);
            }
            Share[tid] = mean;
        }
        __syncthreads();

        mean = Share[0];
    }
    // var  = avg(x**2) - avg(x)**2
    // rstd = 1/sqrt(var)
    float rstd = rsqrtf((mean.y - ew_sqr(mean.x)) + epsilon);
    if (tid == 0)
    {
        Mean[n] = mean.x;
        Rstd[n] = rstd;
    }

    // norm, gain, bias
    #pragma unroll 4
    for (uint k = tid; k < K; k += THREADS, offset += THREADS)
    {
        V x = load(add_ptr_u(X, offset));
        V g = load(G, k);
        V b = load(B, k);

        V xhat = ew_mul(ew_sub(x, mean.x), rstd);
        V    y = ew_add(ew_mul(xhat, g), b);

        if (relu)
            y = ew_relu(y);

        store(add_ptr_u(Y, offset), y);
    }
}

// y, x: device [N, K] rows; g, b: [K] float; mean, rstd: [N] float; rcpK = 1.0f / K.
template <typename T, typename V>
bool LayerNormForward_NC(CUstream stream, int SMs,
              T* y,
          float* mean,
          float* rstd,
    const     T* x,
    const float* g,
    const float* b,
    float epsilon, int K, int N, float rcpK, int relu)
{
    dim3 grid(N, 1, 1);

    if ((K & 3) == 0)
    {
        K >>= 2; // vector loads
                   V* Y = (V*)y;
        const      V* X = (const V*)x;
        const float4* G = (const float4*)g;
        const float4* B = (const float4*)b;
        if (K >= 256)
            layer_norm_NC<V,float4,256><<<grid, 256,0,stream>>>(Y, mean, rstd, X, G, B, epsilon, K, rcpK, relu);
        else
            layer_norm_NC<V,float4, 32><<<grid,  32,0,stream>>>(Y, mean, rstd, X, G, B, epsilon, K, rcpK, relu);
    }
    else
    {
        if (K >= 256)
            layer_norm_NC<T,float ,256><<<grid, 256,0,stream>>>(y, mean, rstd, x, g, b, epsilon, K, rcpK, relu);
        else
            layer_norm_NC<T,float , 32><<<grid,  32,0,stream>>>(y, mean, rstd, x, g, b, epsilon, K, rcpK, relu);
    }
    return true;
}
template bool LayerNormForward_NC<ehalf,ehalf4>(CUstream stream, int SMs, ehalf* y, float* mean, float* rstd, const ehalf* x, const float* g, const float* b, float epsilon, int K, int N, float rcpK, int relu);
