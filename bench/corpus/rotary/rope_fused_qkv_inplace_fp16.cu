// NeoX rotary embedding applied in place inside the fused QKV projection output, the way TensorRT-LLM's and vLLM's
// fused-QKV attention paths do it: qkv [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim] holds each token's
// query heads, then its key heads, then its value heads (left untouched). Because the key heads follow the query
// heads in the row, one loop over the (head, pair) index of the first num_heads + num_kv_heads heads covers q and k
// alike. int64 positions, one fp32 cos_sin_cache [max_position, head_dim] (cos in the first half, sin in the second;
// full rotary, rot_dim == head_dim), math in fp32 and one rounding per output. One token per block, block =
// min((num_heads + num_kv_heads) * head_dim / 2, 512) threads striding over the pairs. TensorRT-LLM naming: a
// kernel template over the element type and a templated invoke function, instantiated for half.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

namespace kernels {

static constexpr int kMaxRopeThreads = 512;

/* kerntune:
args  = ["qkv: inout f16[num_tokens * (num_heads + 2 * num_kv_heads) * head_dim]",
         "positions: in i64[num_tokens] ~ randint(0, 4096)",
         "cos_sin_cache: in f32[4096 * head_dim] ~ uniform(-1, 1)",
         "num_heads: i32 = num_heads", "num_kv_heads: i32 = num_kv_heads", "head_dim: i32 = head_dim"]
sizes = [{ num_tokens = 8192, num_heads = 32, num_kv_heads = 8, head_dim = 128 },
         { num_tokens = 16, num_heads = 8, num_kv_heads = 1, head_dim = 128 },
         { num_tokens = 1001, num_heads = 25, num_kv_heads = 5, head_dim = 80 }]
grid  = "num_tokens"
block = "min((num_heads + num_kv_heads) * head_dim / 2, 512)"
template_args = ["__half"]
*/
template <typename T>
__global__ void applyRopeFusedQKVKernel(T* qkv,                                 // [num_tokens, (nh + 2 * nkv) * hd]
                                        const int64_t* __restrict__ positions,  // [num_tokens]
                                        const float* __restrict__ cos_sin_cache,  // [max_position, head_dim]
                                        const int num_heads, const int num_kv_heads, const int head_dim) {
  const int token_idx = blockIdx.x;
  const int half_dim = head_dim / 2;
  const int64_t qkv_stride = static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim;

  T* token_qkv = qkv + token_idx * qkv_stride;
  const float* cos_ptr = cos_sin_cache + positions[token_idx] * head_dim;
  const float* sin_ptr = cos_ptr + half_dim;

  // q heads [0, num_heads) then k heads [num_heads, num_heads + num_kv_heads), contiguous in the row; the v heads
  // after them are not rotated
  const int num_pairs = (num_heads + num_kv_heads) * half_dim;
  for (int idx = threadIdx.x; idx < num_pairs; idx += blockDim.x) {
    const int head = idx / half_dim;
    const int i = idx - head * half_dim;
    T* head_ptr = token_qkv + head * head_dim;

    const float cos_v = cos_ptr[i];
    const float sin_v = sin_ptr[i];
    const float x1 = static_cast<float>(head_ptr[i]);
    const float x2 = static_cast<float>(head_ptr[i + half_dim]);
    head_ptr[i] = static_cast<T>(x1 * cos_v - x2 * sin_v);
    head_ptr[i + half_dim] = static_cast<T>(x2 * cos_v + x1 * sin_v);
  }
}

template <typename T>
void invokeApplyRopeFusedQKV(T* qkv, const int64_t* positions, const float* cos_sin_cache, const int num_tokens,
                             const int num_heads, const int num_kv_heads, const int head_dim, cudaStream_t stream) {
  const dim3 grid(num_tokens);
  const dim3 block(std::min((num_heads + num_kv_heads) * head_dim / 2, kMaxRopeThreads));
  applyRopeFusedQKVKernel<T><<<grid, block, 0, stream>>>(qkv, positions, cos_sin_cache, num_heads, num_kv_heads,
                                                         head_dim);
}

template void invokeApplyRopeFusedQKV<half>(half* qkv, const int64_t* positions, const float* cos_sin_cache,
                                            const int num_tokens, const int num_heads, const int num_kv_heads,
                                            const int head_dim, cudaStream_t stream);

}  // namespace kernels
