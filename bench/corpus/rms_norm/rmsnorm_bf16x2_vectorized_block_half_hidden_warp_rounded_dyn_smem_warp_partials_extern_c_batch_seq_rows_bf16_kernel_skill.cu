// RMSNorm in the style of the kernel-skill examples (burtenshaw/kernel-skill,
// examples/qwen3_8b/kernel_src/rmsnorm.cu: rmsnorm_kernel_bf16_vectorized behind the extern "C"
// rmsnorm_forward_bf16, an agent-written kernel for Qwen3-8B, hidden 4096, rms_norm_eps 1e-6), bf16:
//   output, input [batch_size * seq_len, hidden_size] out of place, weight [hidden_size]; argument order output,
//   input, weight, hidden_size, eps; __restrict__ pointers; the row is blockIdx.x (int offsets)
//   rows read as __nv_bfloat162 pairs (hidden_size / 2 of them, #pragma unroll 4 over a block-stride loop), an
//   odd last element handled by thread 0 alone; fp32 sum of squares
//   block_reduce_sum: __shfl_xor_sync warp butterflies, one float per warp in DYNAMIC shared memory
//   (extern __shared__ char smem[], sized ceil(threads / 32) * 4 by the launcher), warp 0 folds the partials;
//   thread 0 writes a static __shared__ rms_inv = rsqrtf(sum / hidden + eps)
//   out = bf16(v * factor * w) per element of the pair, one rounding
//   host: threads = min(hidden / 2, 1024), at least 32, rounded up to whole warps; the vectorized kernel for
//   even hidden >= 64, else a scalar templated fallback (kept, not taken by these sizes); stream argument
// Fixed: the fallback branch recomputed threads (min(hidden, 1024)) but kept the dynamic smem sized for the
// pair kernel's smaller block, so its block_reduce_sum wrote warp partials past the allocation (e.g. hidden 63:
// 4 bytes for 2 warps); smem is now recomputed with the threads. The pair path itself is unchanged (the launcher
// takes it only for even rows, so the bf16x2 accesses stay aligned).
// The tail set is an even row length (the pair kernel's domain) that no warp multiple divides: 515 pairs on
// 544 threads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

constexpr int WARP_SIZE = 32;
constexpr int MAX_THREADS = 1024;

// Warp-level reduction using shuffle operations
template <typename T>
__device__ __forceinline__ T warp_reduce_sum(T val) {
    #pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        val += __shfl_xor_sync(0xffffffff, val, offset);
    }
    return val;
}

// Block-level reduction using shared memory
template <typename T>
__device__ __forceinline__ T block_reduce_sum(T val, T* shared) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int wid = threadIdx.x / WARP_SIZE;

    val = warp_reduce_sum(val);

    if (lane == 0) {
        shared[wid] = val;
    }
    __syncthreads();

    // Final reduction in first warp
    const int num_warps = (blockDim.x + WARP_SIZE - 1) / WARP_SIZE;
    val = (threadIdx.x < num_warps) ? shared[threadIdx.x] : T(0);
    if (wid == 0) {
        val = warp_reduce_sum(val);
    }
    return val;
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ __forceinline__ float from_float(float x, float*) { return x; }
__device__ __forceinline__ __nv_bfloat16 from_float(float x, __nv_bfloat16*) { return __float2bfloat16(x); }

// BF16 kernel using __nv_bfloat162 for 2-element vectorization (even hidden_size >= 64)
/* kerntune:
args  = ["output: out bf16[rows * hidden]", "input: in bf16[rows * hidden]", "weight: in bf16[hidden]",
         "hidden_size: i32 = hidden", "eps: f32 = 1e-6"]
sizes = [{ rows = 16384, hidden = 4096 }, { rows = 4, hidden = 4096 }, { rows = 999, hidden = 1030 }]
grid  = "rows"
block = "cdiv(max(min(hidden / 2, 1024), 32), 32) * 32"
smem  = "cdiv(max(min(hidden / 2, 1024), 32), 32) * 4"
*/
__global__ void rmsnorm_kernel_bf16_vectorized(
    __nv_bfloat16* __restrict__ output,
    const __nv_bfloat16* __restrict__ input,
    const __nv_bfloat16* __restrict__ weight,
    const int hidden_size,
    const float eps
) {
    extern __shared__ char smem[];
    float* shared = reinterpret_cast<float*>(smem);

    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    const int stride = blockDim.x;

    const __nv_bfloat16* row_input = input + row * hidden_size;
    __nv_bfloat16* row_output = output + row * hidden_size;

    // Phase 1: sum of squares with bf16x2 loads
    float sum_sq = 0.0f;
    const int vec_hidden = hidden_size / 2;
    const __nv_bfloat162* vec_input = reinterpret_cast<const __nv_bfloat162*>(row_input);

    #pragma unroll 4
    for (int i = tid; i < vec_hidden; i += stride) {
        __nv_bfloat162 v = vec_input[i];
        float v0 = __bfloat162float(v.x);
        float v1 = __bfloat162float(v.y);
        sum_sq += v0 * v0 + v1 * v1;
    }

    // odd last element (not taken for even rows)
    if (hidden_size % 2 == 1 && tid == 0) {
        float v = __bfloat162float(row_input[hidden_size - 1]);
        sum_sq += v * v;
    }

    sum_sq = block_reduce_sum(sum_sq, shared);

    __shared__ float rms_inv;
    if (tid == 0) {
        float mean_sq = sum_sq / static_cast<float>(hidden_size);
        rms_inv = rsqrtf(mean_sq + eps);
    }
    __syncthreads();

    const float factor = rms_inv;

    // Phase 2: normalize and weight with bf16x2 stores
    const __nv_bfloat162* vec_weight = reinterpret_cast<const __nv_bfloat162*>(weight);
    __nv_bfloat162* vec_output = reinterpret_cast<__nv_bfloat162*>(row_output);

    #pragma unroll 4
    for (int i = tid; i < vec_hidden; i += stride) {
        __nv_bfloat162 v_in = vec_input[i];
        __nv_bfloat162 v_w = vec_weight[i];

        float v0 = __bfloat162float(v_in.x);
        float v1 = __bfloat162float(v_in.y);
        float w0 = __bfloat162float(v_w.x);
        float w1 = __bfloat162float(v_w.y);

        __nv_bfloat162 result;
        result.x = __float2bfloat16(v0 * factor * w0);
        result.y = __float2bfloat16(v1 * factor * w1);
        vec_output[i] = result;
    }

    if (hidden_size % 2 == 1 && tid == 0) {
        float v = __bfloat162float(row_input[hidden_size - 1]);
        float w = __bfloat162float(weight[hidden_size - 1]);
        row_output[hidden_size - 1] = __float2bfloat16(v * factor * w);
    }
}

// Generic scalar kernel (fallback for odd or short rows)
template <typename scalar_t, typename acc_t = float>
__global__ void rmsnorm_kernel(
    scalar_t* __restrict__ output,
    const scalar_t* __restrict__ input,
    const scalar_t* __restrict__ weight,
    const int hidden_size,
    const float eps
) {
    extern __shared__ char smem[];
    acc_t* shared = reinterpret_cast<acc_t*>(smem);

    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    const int stride = blockDim.x;

    const scalar_t* row_input = input + row * hidden_size;
    scalar_t* row_output = output + row * hidden_size;

    acc_t sum_sq = 0.0f;
    for (int i = tid; i < hidden_size; i += stride) {
        acc_t val = to_float(row_input[i]);
        sum_sq += val * val;
    }

    sum_sq = block_reduce_sum(sum_sq, shared);

    __shared__ acc_t rms_inv;
    if (tid == 0) {
        acc_t mean_sq = sum_sq / static_cast<acc_t>(hidden_size);
        rms_inv = rsqrtf(mean_sq + eps);
    }
    __syncthreads();

    for (int i = tid; i < hidden_size; i += stride) {
        acc_t val = to_float(row_input[i]);
        acc_t w = to_float(weight[i]);
        row_output[i] = from_float(val * rms_inv * w, (scalar_t*)nullptr);
    }
}

extern "C" {

// output, input: device [batch_size * seq_len, hidden_size]; weight: device [hidden_size].
void rmsnorm_forward_bf16(
    __nv_bfloat16* output,
    const __nv_bfloat16* input,
    const __nv_bfloat16* weight,
    const int batch_size,
    const int seq_len,
    const int hidden_size,
    const float eps,
    cudaStream_t stream
) {
    const int num_rows = batch_size * seq_len;
    int threads = min(hidden_size / 2, MAX_THREADS);
    threads = max(threads, WARP_SIZE);
    threads = ((threads + WARP_SIZE - 1) / WARP_SIZE) * WARP_SIZE;

    size_t smem_size = ((threads + WARP_SIZE - 1) / WARP_SIZE) * sizeof(float);

    if (hidden_size % 2 == 0 && hidden_size >= 64) {
        rmsnorm_kernel_bf16_vectorized<<<num_rows, threads, smem_size, stream>>>(
            output, input, weight, hidden_size, eps
        );
    } else {
        threads = min(hidden_size, MAX_THREADS);
        threads = ((threads + WARP_SIZE - 1) / WARP_SIZE) * WARP_SIZE;
        smem_size = ((threads + WARP_SIZE - 1) / WARP_SIZE) * sizeof(float);
        rmsnorm_kernel<__nv_bfloat16><<<num_rows, threads, smem_size, stream>>>(
            output, input, weight, hidden_size, eps
        );
    }
}

} // extern "C"
