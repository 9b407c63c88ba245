// Per-group INT4 KV-cache quantization as boostr writes it (ml-rust/boostr, a Rust LLM inference / training
// library on cudarc: src/ops/cuda/kernels/cache/kv_cache_int4.cu, quantize_kv_int4_per_group_fp16, one of three
// extern "C" __global__ wrappers (fp32 / fp16 / bf16) around a templated __device__ implementation, launched from
// the Rust side through a LaunchConfig). Input [num_tokens, head_dim] (tokens of every KV head flattened) in fp16,
// quantized in groups of group_size consecutive values of a row (32, 64 or 128; the last group of a row may be
// partial), ASYMMETRIC min-max: scale = (max - min) / 15, zero = min (scale 1 when the range is below 1e-8),
// q = clamp(roundf((x - zero) / scale), 0, 15) with roundf halving away from zero, packed two per byte LOW NIBBLE
// FIRST into output [num_tokens, head_dim / 2]; scales and zeros are separate fp32 arrays of num_tokens *
// ceil(head_dim / group_size) entries (token-major). Launch: one block per (token, group), grid (num_tokens,
// groups per token), 256 threads; each thread folds a strided min / max over the group, then a power-of-two tree
// over __shared__ float smin[256], smax[256] (blockDim.x must be 256), thread 0 writes scale / zero to shared and to
// global, a second pass re-reads the input two values per thread and stores one packed byte; int indices, argument
// order (input, output, scales, zeros, num_tokens, head_dim, group_size). The Rust LaunchConfig also asks for 1024
// bytes of dynamic shared memory that the kernel never uses (it keeps its static arrays); kept.
// Fixed: the Rust launcher used grid (num_tokens * groups_per_token, 1, 1) while the kernel reads the token from
// blockIdx.x and the group from blockIdx.y, so only group 0 of each token was ever quantized and the other scales,
// zeros and nibbles were left unwritten whenever head_dim > group_size; the launcher now passes grid (num_tokens,
// groups_per_token). Requirements of the original kept: head_dim and group_size even (a pair never straddles a
// group or a row). load_dtype of boostr's dtype_traits.cuh written out as a small overload.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <cfloat>

__device__ __forceinline__ float load_dtype(const __half* p, int i) { return __half2float(p[i]); }

__device__ __forceinline__ uint8_t pack_int4(int val0, int val1) {
    return (uint8_t)((val0 & 0xF) | ((val1 & 0xF) << 4));
}

// q = clamp(round((x - zero) / scale), 0, 15)
__device__ __forceinline__ int quantize_to_int4(float x, float scale, float zero) {
    float q = (x - zero) / scale;
    q = roundf(q);
    q = fmaxf(0.0f, fminf(15.0f, q));
    return (int)q;
}

template <typename T>
__device__ void quantize_kv_int4_per_group_impl(
    const T* __restrict__ input,
    uint8_t* __restrict__ output,
    float* __restrict__ scales,
    float* __restrict__ zeros,
    int num_tokens,
    int head_dim,
    int group_size
) {
    int token_idx = blockIdx.x;
    int group_in_token = blockIdx.y;
    int tid = threadIdx.x;

    if (token_idx >= num_tokens) return;

    int groups_per_token = (head_dim + group_size - 1) / group_size;
    if (group_in_token >= groups_per_token) return;

    int group_start = group_in_token * group_size;
    int group_end = min(group_start + group_size, head_dim);
    int group_len = group_end - group_start;

    const T* token_input = input + token_idx * head_dim + group_start;

    __shared__ float smin[256];
    __shared__ float smax[256];

    float local_min = FLT_MAX;
    float local_max = -FLT_MAX;
    for (int i = tid; i < group_len; i += blockDim.x) {
        float val = load_dtype(token_input, i);
        local_min = fminf(local_min, val);
        local_max = fmaxf(local_max, val);
    }
    smin[tid] = local_min;
    smax[tid] = local_max;
    __syncthreads();

    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            smin[tid] = fminf(smin[tid], smin[tid + s]);
            smax[tid] = fmaxf(smax[tid], smax[tid + s]);
        }
        __syncthreads();
    }

    __shared__ float scale;
    __shared__ float zero;
    if (tid == 0) {
        float min_val = smin[0];
        float max_val = smax[0];
        float range = max_val - min_val;
        if (range < 1e-8f) {
            scale = 1.0f;
            zero = min_val;
        } else {
            scale = range / 15.0f;
            zero = min_val;
        }
        int global_group_idx = token_idx * groups_per_token + group_in_token;
        scales[global_group_idx] = scale;
        zeros[global_group_idx] = zero;
    }
    __syncthreads();

    uint8_t* token_output = output + token_idx * (head_dim / 2) + (group_start / 2);

    // quantize and pack pairs, low nibble first
    for (int i = tid * 2; i < group_len; i += blockDim.x * 2) {
        float val0 = 0.0f, val1 = 0.0f;
        if (i < group_len) {
            val0 = load_dtype(token_input, i);
        }
        if (i + 1 < group_len) {
            val1 = load_dtype(token_input, i + 1);
        }
        int q0 = quantize_to_int4(val0, scale, zero);
        int q1 = quantize_to_int4(val1, scale, zero);
        token_output[i / 2] = pack_int4(q0, q1);
    }
}

/* kerntune:
args  = ["input: in f16[num_tokens * head_dim]", "output: out u8[num_tokens * head_dim / 2]",
         "scales: out f32[num_tokens * cdiv(head_dim, 64)]", "zeros: out f32[num_tokens * cdiv(head_dim, 64)]",
         "num_tokens: i32 = num_tokens", "head_dim: i32 = head_dim", "group_size: i32 = 64"]
sizes = [{ num_tokens = 262144, head_dim = 128 }, { num_tokens = 32, head_dim = 128 }, { num_tokens = 7993, head_dim = 96 }]
grid  = ["num_tokens", "cdiv(head_dim, 64)"]
block = 256
smem  = 1024
*/
extern "C" __global__ void quantize_kv_int4_per_group_fp16(
    const __half* __restrict__ input,
    uint8_t* __restrict__ output,
    float* __restrict__ scales,
    float* __restrict__ zeros,
    int num_tokens,
    int head_dim,
    int group_size
) {
    quantize_kv_int4_per_group_impl<__half>(input, output, scales, zeros, num_tokens, head_dim, group_size);
}

// quantize_kv_int4_impl without the Rust plumbing: input [num_tokens, head_dim] fp16 on the device, output
// [num_tokens, head_dim / 2] packed bytes, scales / zeros [num_tokens * ceil(head_dim / group_size)] fp32.
int quantize_kv_int4(const __half* input, uint8_t* packed, float* scales, float* zeros, int num_tokens, int head_dim,
                     int group_size, cudaStream_t stream) {
    if (num_tokens <= 0 || head_dim <= 0) return 0;
    if ((head_dim & 1) || (group_size & 1)) return -1;
    const int groups_per_token = (head_dim + group_size - 1) / group_size;
    dim3 grid(num_tokens, groups_per_token, 1);
    dim3 block(256, 1, 1);
    const unsigned int shared_mem_bytes = 256 * 4;
    quantize_kv_int4_per_group_fp16<<<grid, block, shared_mem_bytes, stream>>>(input, packed, scales, zeros,
                                                                               num_tokens, head_dim, group_size);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
