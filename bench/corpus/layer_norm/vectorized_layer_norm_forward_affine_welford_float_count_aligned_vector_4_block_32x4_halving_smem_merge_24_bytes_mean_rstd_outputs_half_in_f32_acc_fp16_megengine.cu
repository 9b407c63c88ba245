// LayerNorm forward as MegEngine writes it (MegEngine/MegEngine, megdnn's CUDA backend:
// dnn/src/cuda/layer_norm/layer_norm_cuda.cu, vectorized_layer_norm_forward_affine_kernel<T, T_ACC> launched by
// launch_vectorized_layer_norm_forward_kernel from layer_norm::forward, the path taken when slice_len % 4 == 0 and
// X, Y are 16-byte aligned; megdnn ported it from PyTorch's vectorized LayerNorm). The fp16 instance: T = half
// (dt_float16), T_ACC = float. X [slice_num, slice_len], weight / bias [slice_len] in T, Y in T, mean and rstd
// [slice_num] in T_ACC; argument order (slice_len, eps, X, weight, bias, mean, rstd, Y). One slice per block of
// (WARP_SIZE, 4) = 128 threads, thrx = threadIdx.x + threadIdx.y * blockDim.x striding the slice in
// aligned_vector<T, 4> loads (8 bytes of half); compute_stats keeps a Welford triple (mean, sigma2, FLOAT count)
// per thread, merges it down each warp with __shfl_down (megdnn's cuda_shfl_compat maps it to the _sync form), then
// across the 4 warps by a halving tree in dynamic shared memory (upper warps write mean / sigma2 pairs and counts,
// lower warps merge; threads.y * 3 / 2 * sizeof(T_ACC) = 24 bytes), and publishes mean and sigma2 / slice_len
// (population variance) through s_data; rstd = rsqrt(var + eps); the second pass re-reads the vectors and writes
// weight * (rstd * (x - mean)) + bias in float, the weight and bias read as scalars, rounded to half once on the
// store; thread 0 writes mean and rstd. Changed: the non-vectorized fallback (a 512-thread Welford kernel, then a
// 256-thread elementwise one) is left out, the launcher rejects a slice_len the vector path cannot take; the
// megdnn dtype checks and after_kernel_launch() are reduced to the launch. Fixed: slice_id * slice_len is unsigned
// 32-bit arithmetic (blockIdx.x times an int) and wraps past 2^32 elements; the slice offset is size_t. Sizes:
// 16384 x 4096, decode 4 x 1024, 999 x 1028 (257 vectors per slice, 2 passes of 128 threads plus 1).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cstdio>

// cuda_shfl_compat.cuh: the legacy shuffle names on the _sync intrinsics
#define __shfl_down(var, delta, width) __shfl_down_sync(0xffffffff, var, delta, width)
#define __shfl(var, srcLane, width) __shfl_sync(0xffffffff, var, srcLane, width)

#define MEGDNN_HOST __host__
#define MEGDNN_DEVICE __device__

namespace megdnn {
namespace cuda {
namespace layer_norm {

constexpr int vec_size = 4;

// warp size may be used as array length, or used in host function
#define WARP_SIZE 32

struct WelfordStat {
    float mean;
    float sigma2;
    float count;
    MEGDNN_HOST MEGDNN_DEVICE WelfordStat() : mean(0.f), sigma2(0.f), count(0.f) {}
    MEGDNN_HOST MEGDNN_DEVICE WelfordStat(float mean, float sigma2, float count)
            : mean(mean), sigma2(sigma2), count(count) {}
};

template <typename T, int vec_size>
struct alignas(sizeof(T) * vec_size) aligned_vector {
    T val[vec_size];
};

template <typename T, bool is_cuda>
using acc_type = float;

template <typename U>
MEGDNN_DEVICE WelfordStat update_welford_stat_online(const U val, const WelfordStat& curr_sum) {
    U delta = static_cast<U>(val - curr_sum.mean);
    U new_count = static_cast<U>(curr_sum.count + 1.f);
    U new_mean = static_cast<U>(curr_sum.mean + delta * (1.f / new_count));
    return {new_mean, curr_sum.sigma2 + delta * (val - new_mean), new_count};
}

MEGDNN_DEVICE WelfordStat combine_welford_stat(const WelfordStat lhs, const WelfordStat rhs) {
    using U = decltype(lhs.count);
    U delta = lhs.mean - rhs.mean;
    U count = rhs.count + lhs.count;
    U mean, sigma2;
    if (count > U(0)) {
        auto coef = 1.f / count;
        auto nA = rhs.count * coef;
        auto nB = lhs.count * coef;
        mean = nA * rhs.mean + nB * lhs.mean;
        sigma2 = rhs.sigma2 + lhs.sigma2 + delta * delta * rhs.count * nB;
    } else {
        mean = U(0);
        sigma2 = U(0);
    }
    return {mean, sigma2, count};
}

template <typename T>
MEGDNN_DEVICE WelfordStat compute_stats(const T* __restrict__ X, const int slice_len, float* buf) {
    using vec_t = aligned_vector<T, vec_size>;
    using acc_t = acc_type<T, true>;
    const vec_t* X_vec = reinterpret_cast<const vec_t*>(X);
    const int numx = blockDim.x * blockDim.y;
    const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
    const int n_vec_to_read = slice_len / vec_size;
    WelfordStat w_stat(0.f, 0.f, 0.f);
    for (int i = thrx; i < n_vec_to_read; i += numx) {
        vec_t data = X_vec[i];
#pragma unroll
        for (int ii = 0; ii < vec_size; ii++) {
            w_stat = update_welford_stat_online(static_cast<acc_t>(data.val[ii]), w_stat);
        }
    }
    // intra-warp reduction
#pragma unroll
    for (int offset = (WARP_SIZE >> 1); offset > 0; offset >>= 1) {
        WelfordStat w_tmp{
                __shfl_down(w_stat.mean, offset, WARP_SIZE),
                __shfl_down(w_stat.sigma2, offset, WARP_SIZE),
                __shfl_down(w_stat.count, offset, WARP_SIZE)};
        w_stat = combine_welford_stat(w_stat, w_tmp);
    }

    // threadIdx.x == 0 has correct values for each warp; inter-warp reductions
    if (blockDim.y > 1) {
        float* mean_sigma_buf = buf;
        float* count_buf = buf + blockDim.y;
        for (int offset = blockDim.y / 2; offset > 0; offset /= 2) {
            // upper half of warps write to shared
            if (threadIdx.x == 0 && threadIdx.y >= offset && threadIdx.y < 2 * offset) {
                const int wrt_y = threadIdx.y - offset;
                mean_sigma_buf[2 * wrt_y] = w_stat.mean;
                mean_sigma_buf[2 * wrt_y + 1] = w_stat.sigma2;
                count_buf[wrt_y] = w_stat.count;
            }
            __syncthreads();

            // lower half merges
            if (threadIdx.x == 0 && threadIdx.y < offset) {
                WelfordStat w_tmp{
                        mean_sigma_buf[2 * threadIdx.y], mean_sigma_buf[2 * threadIdx.y + 1],
                        count_buf[threadIdx.y]};
                w_stat = combine_welford_stat(w_stat, w_tmp);
            }
            __syncthreads();
        }
        if (threadIdx.x == 0 && threadIdx.y == 0) {
            mean_sigma_buf[0] = w_stat.mean;
            mean_sigma_buf[1] = w_stat.sigma2 / float(slice_len);
        }
        __syncthreads();
        return WelfordStat{mean_sigma_buf[0], mean_sigma_buf[1], 0.f};
    } else {
        return WelfordStat{
                __shfl(w_stat.mean, 0, WARP_SIZE),
                __shfl(w_stat.sigma2, 0, WARP_SIZE) / float(slice_len), 0.f};
    }
}

/* kerntune:
args  = ["slice_len: i32 = slice_len", "eps: f32 = 1e-5", "X: in f16[slice_num * slice_len]",
         "weight: in f16[slice_len]", "bias: in f16[slice_len]", "mean: out f32[slice_num]",
         "rstd: out f32[slice_num]", "Y: out f16[slice_num * slice_len]"]
sizes = [{ slice_num = 16384, slice_len = 4096 }, { slice_num = 4, slice_len = 1024 },
         { slice_num = 999, slice_len = 1028 }]
grid  = "slice_num"
block = [32, 4]
smem  = 24
template_args = ["__half", "float"]
*/
template <typename T, typename T_ACC>
__global__ void vectorized_layer_norm_forward_affine_kernel(
        const int slice_len, T_ACC eps, const T* __restrict__ X, const T* weight,
        const T* bias, T_ACC* mean, T_ACC* rstd, T* Y) {
    // a WelfordStat array in shared memory would bank-conflict (3 consecutive floats per thread)
    extern __shared__ float s_data[];

    auto slice_id = blockIdx.x;
    const T* slice = X + (size_t)slice_id * slice_len;
    WelfordStat slice_w_stat = compute_stats(slice, slice_len, s_data);
    using vec_t = aligned_vector<T, vec_size>;
    const vec_t* X_vec = reinterpret_cast<const vec_t*>(slice);
    vec_t* Y_vec = reinterpret_cast<vec_t*>(Y + (size_t)slice_id * slice_len);
    const int numx = blockDim.x * blockDim.y;
    const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
    const int n_vec_to_read = slice_len / vec_size;
    T_ACC rstd_val = static_cast<T_ACC>(rsqrt(slice_w_stat.sigma2 + eps));

    for (int i = thrx; i < n_vec_to_read; i += numx) {
        vec_t data = X_vec[i];
        vec_t out;
        // computed in T_ACC; the result is rounded to T on the assignment
#pragma unroll
        for (int ii = 0; ii < vec_size; ii++) {
            out.val[ii] = static_cast<T>(
                    static_cast<T_ACC>(weight[i * vec_size + ii]) *
                            (rstd_val * (static_cast<T_ACC>(data.val[ii]) - slice_w_stat.mean)) +
                    static_cast<T_ACC>(bias[i * vec_size + ii]));
        }
        Y_vec[i] = out;
    }
    if (thrx == 0) {
        mean[slice_id] = slice_w_stat.mean;
        rstd[slice_id] = rstd_val;
    }
}

// X, Y: device [slice_num, slice_len]; weight, bias: [slice_len]; mean, rstd: [slice_num] fp32.
template <typename T, typename T_ACC>
void launch_vectorized_layer_norm_forward_kernel(
        int64_t slice_len, int64_t slice_num, T_ACC eps, const T* X_data, const T* weight_data,
        const T* bias_data, T* Y_data, T_ACC* mean_data, T_ACC* rstd_data, cudaStream_t stream) {
    const int num_threads = 128;
    const dim3 threads(WARP_SIZE, num_threads / WARP_SIZE, 1);
    const dim3 blocks(slice_num);
    int nshared = threads.y > 1 ? threads.y * 3 / 2 * sizeof(T_ACC) : 0;

    vectorized_layer_norm_forward_affine_kernel<<<blocks, threads, nshared, stream>>>(
            slice_len, eps, X_data, weight_data, bias_data, mean_data, rstd_data, Y_data);
}

template <typename T, typename T_ACC>
void forward(
        T* X, T* weight, T* bias, int64_t slice_num, int64_t slice_len, T_ACC eps, T* Y,
        T_ACC* mean, T_ACC* rstd, cudaStream_t stream) {
    auto can_vectorize = [&](const T* ptr, int alignment) {
        uint64_t addr = reinterpret_cast<uint64_t>(ptr);
        return addr % alignment == 0;
    };
    constexpr int alignment = vec_size * sizeof(T);
    if (slice_len % vec_size == 0 && can_vectorize(X, alignment) && can_vectorize(Y, alignment)) {
        launch_vectorized_layer_norm_forward_kernel<T, T_ACC>(
                slice_len, slice_num, eps, X, weight, bias, Y, mean, rstd, stream);
    } else {
        fprintf(stderr, "layer_norm: slice_len %lld or the pointers cannot take the vectorized path\n",
                (long long)slice_len);
    }
}

template void forward<__half, float>(__half*, __half*, __half*, int64_t, int64_t, float, __half*, float*, float*,
                                     cudaStream_t);

}  // namespace layer_norm
}  // namespace cuda
}  // namespace megdnn
