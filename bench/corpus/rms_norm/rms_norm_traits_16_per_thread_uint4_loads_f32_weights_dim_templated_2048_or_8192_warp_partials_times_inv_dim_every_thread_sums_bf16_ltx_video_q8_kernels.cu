// RMSNorm in the style of the LTX-Video Q8 kernels (KONAKONA666/q8_kernels, the kernels behind LTX-Video-Q8:
// csrc/ops/rms_norm_cuda.cu rms_norm_kernel<Ktraits> behind rms_norm_cuda<norm_affine, input_t, output_t>, the
// RMSNorm of the 8-bit LTX-Video transformer and its T5 encoder), bf16 in, f32 weights, bf16 out:
//   x [batch, dim] with a row stride, out [batch, dim] with its own row stride, out of place; weights [dim] are
//   FLOAT (weights_t = float) whatever the activation type; the RMSNormsParamsBase fields passed as kernel
//   arguments in the struct's order (x_ptr, weights_ptr, out_ptr as void*, x_batch_stride, out_batch_stride,
//   batch, dim) plus eps
//   a kernel-traits struct rmsnorm_kernel_traits<kNThreads, dim, norm_affine, input_t, output_t> fixes the row:
//   every thread owns ThreadElems = 16 CONSECUTIVE elements (static_assert(16 * kNThreads == dim)), moved whole
//   with uint4 (vec_t) copies through a local array (2 copies of 8 bf16, 4 copies of 4 float weights), converted
//   to float registers
//   sum of squares in registers, an Allreduce<32> template of __shfl_xor_sync steps, lane 0 of each warp writes
//   warp_sum * (1 / dim) to extern __shared__ smem_ (kNThreads / 32 floats from the launcher), then EVERY thread
//   adds the warp partials serially; rsqrtf of the mean; out = (x * norm) * w in float, one rounding to bf16
//   host: only dim 2048 (128 threads) and 8192 (512 threads) are instantiated, one block per row
// Fixed: the kernel had no epsilon (rsqrtf(mean)), so a zero row (padding tokens) gave inf * 0 = NaN; eps
// (LTX-Video's RMSNorm uses 1e-6) is added to the mean as in the model's reference. Any other dim is still not
// launched (the original skips it silently; the launcher now says so by its return value). The tail set is an
// odd row count, the row length being fixed by the template.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

template <int kNThreads_, int dim, bool norm_affine_, typename input_t_, typename output_t_>
struct rmsnorm_kernel_traits {
    using input_t = input_t_;
    using output_t = output_t_;
    using weights_t = float;
    using vec_t = uint4;

    static constexpr bool norm_affine = norm_affine_;
    static constexpr int kNThreads = kNThreads_;
    static constexpr int kNBytes_input = sizeof(input_t);
    static_assert(kNBytes_input == 1 || kNBytes_input == 2 || kNBytes_input == 4);
    static constexpr int ThreadElems = 16;
    static_assert(ThreadElems * kNThreads == dim);
};

// this thread's NElems consecutive values of a row, copied as vec_t chunks, widened to float
template <int NElems, typename input_t, typename vec_t>
inline __device__ void load_input(const input_t* row, float vals[NElems]) {
    constexpr int kPerVec = sizeof(vec_t) / sizeof(input_t);
    constexpr int kVecs = NElems / kPerVec;
    input_t staged[NElems];
    const vec_t* src = reinterpret_cast<const vec_t*>(row) + kVecs * threadIdx.x;
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
        reinterpret_cast<vec_t*>(staged)[v] = src[v];
    }
#pragma unroll
    for (int e = 0; e < NElems; ++e) {
        vals[e] = float(staged[e]);
    }
}

// narrowed to output_t in a local array, written back as vec_t chunks
template <int NElems, typename vec_t, typename output_t>
inline __device__ void store_output(output_t* row, const float vals[NElems]) {
    constexpr int kPerVec = sizeof(vec_t) / sizeof(output_t);
    constexpr int kVecs = NElems / kPerVec;
    output_t staged[NElems];
#pragma unroll
    for (int e = 0; e < NElems; ++e) {
        staged[e] = output_t(vals[e]);
    }
    vec_t* dst = reinterpret_cast<vec_t*>(row) + kVecs * threadIdx.x;
#pragma unroll
    for (int v = 0; v < kVecs; ++v) {
        dst[v] = reinterpret_cast<const vec_t*>(staged)[v];
    }
}

template <typename T>
struct SumOp {
    __device__ inline T operator()(T const& a, T const& b) { return a + b; }
};

template <int THREADS>
struct Allreduce {
    static_assert(THREADS == 32 || THREADS == 16 || THREADS == 8 || THREADS == 4);
    template <typename T, typename Operator>
    static __device__ inline T run(T v, Operator& op) {
        constexpr int OFFSET = THREADS / 2;
        v = op(v, __shfl_xor_sync(uint32_t(-1), v, OFFSET));
        return Allreduce<OFFSET>::run(v, op);
    }
};

template <>
struct Allreduce<2> {
    template <typename T, typename Operator>
    static __device__ inline T run(T v, Operator& op) {
        return op(v, __shfl_xor_sync(uint32_t(-1), v, 1));
    }
};

/* kerntune:
args  = ["x_ptr: in bf16[batch * dim]", "weights_ptr: in f32[dim]", "out_ptr: out bf16[batch * dim]",
         "x_batch_stride: i64 = dim", "out_batch_stride: i64 = dim", "batch: i32 = batch", "dim: i32 = dim",
         "eps: f32 = 1e-6"]
sizes = [{ batch = 32768, dim = 2048 }, { batch = 4, dim = 2048 }, { batch = 999, dim = 2048 }]
grid  = "batch"
block = 128
smem  = 16
template_args = ["rmsnorm_kernel_traits<128, 2048, true, __nv_bfloat16, __nv_bfloat16>"]
*/
template <typename Ktraits>
__global__ __launch_bounds__(Ktraits::kNThreads)
void rms_norm_kernel(void* x_ptr, void* weights_ptr, void* out_ptr, int64_t x_batch_stride,
                     int64_t out_batch_stride, int batch, int dim, float eps) {
    constexpr int kNThreads = Ktraits::kNThreads;
    constexpr int kWarpSize = kNThreads < 32 ? kNThreads : 32;  // std::min(kNThreads, 32) in the relaxed-constexpr build
    constexpr int kNWarps = kNThreads / kWarpSize;
    constexpr int ThreadElems = Ktraits::ThreadElems;
    constexpr bool norm_affine = Ktraits::norm_affine;

    using input_t = typename Ktraits::input_t;
    using weights_t = typename Ktraits::weights_t;
    using vec_t = typename Ktraits::vec_t;
    using output_t = typename Ktraits::output_t;

    extern __shared__ float smem_[];

    const int batch_id = blockIdx.x;
    const int warp_id = threadIdx.x / 32;

    const input_t* x = reinterpret_cast<const input_t*>(x_ptr) + batch_id * x_batch_stride;
    const weights_t* weights = norm_affine ? reinterpret_cast<const weights_t*>(weights_ptr) : nullptr;
    output_t* out = reinterpret_cast<output_t*>(out_ptr) + batch_id * out_batch_stride;

    const float inv_dim = 1.0f / dim;
    float x_vals[ThreadElems];
    float w_vals[ThreadElems];

    load_input<ThreadElems, input_t, vec_t>(x, x_vals);

    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < ThreadElems; ++e) {
        ss = ss + x_vals[e] * x_vals[e];
    }

    SumOp<float> sum_op;
    const float warp_ss = Allreduce<kWarpSize>::run(ss, sum_op);
    if (threadIdx.x % 32 == 0) {
        smem_[warp_id] = warp_ss * inv_dim;
    }
    __syncthreads();

    float mean_sq = 0.0f;
#pragma unroll
    for (int w = 0; w < kNWarps; ++w) {
        mean_sq = mean_sq + smem_[w];
    }

    const float norm = rsqrtf(mean_sq + eps);
    if constexpr (norm_affine) {
        load_input<ThreadElems, weights_t, vec_t>(weights, w_vals);
    }
#pragma unroll
    for (int e = 0; e < ThreadElems; ++e) {
        if constexpr (norm_affine) {
            x_vals[e] = (x_vals[e] * norm) * w_vals[e];
        } else {
            x_vals[e] = x_vals[e] * norm;
        }
    }

    store_output<ThreadElems, vec_t, output_t>(out, x_vals);
}

template <int kNThreads, int dim, bool norm_affine, typename input_t, typename output_t>
void rms_norm_launch(void* x_ptr, void* weights_ptr, void* out_ptr, int64_t x_batch_stride,
                     int64_t out_batch_stride, int batch, float eps, cudaStream_t stream) {
    using Ktraits = rmsnorm_kernel_traits<kNThreads, dim, norm_affine, input_t, output_t>;

    dim3 grid(batch);
    auto kernel = &rms_norm_kernel<Ktraits>;
    size_t shared_mem = sizeof(float) * kNThreads / 32;

    kernel<<<grid, Ktraits::kNThreads, shared_mem, stream>>>(x_ptr, weights_ptr, out_ptr, x_batch_stride,
                                                             out_batch_stride, batch, dim, eps);
}

// x: device [batch, dim] (row stride x_batch_stride), weights: device float [dim], out: device [batch, dim].
// Returns false for a dim with no instantiation (nothing launched).
template <bool norm_affine, typename input_t, typename output_t>
bool rms_norm_cuda(void* x_ptr, void* weights_ptr, void* out_ptr, int64_t x_batch_stride, int64_t out_batch_stride,
                   int batch, int dim, float eps, cudaStream_t stream) {
    if (dim == 2048) {
        rms_norm_launch<128, 2048, norm_affine, input_t, output_t>(x_ptr, weights_ptr, out_ptr, x_batch_stride,
                                                                   out_batch_stride, batch, eps, stream);
    } else if (dim == 8192) {
        rms_norm_launch<512, 8192, norm_affine, input_t, output_t>(x_ptr, weights_ptr, out_ptr, x_batch_stride,
                                                                   out_batch_stride, batch, eps, stream);
    } else {
        return false;
    }
    return true;
}

template bool rms_norm_cuda<true, __nv_bfloat16, __nv_bfloat16>(void*, void*, void*, int64_t, int64_t, int, int,
                                                                 float, cudaStream_t);
template bool rms_norm_cuda<false, __nv_bfloat16, __nv_bfloat16>(void*, void*, void*, int64_t, int64_t, int, int,
                                                                  float, cudaStream_t);
