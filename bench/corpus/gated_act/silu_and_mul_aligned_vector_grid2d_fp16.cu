// SiLU-and-mul (fp16) in the style of vLLM's newer vectorized activation kernels: the row is read and written
// as whole AlignedVector<T, VEC> structs (alignas(sizeof(T) * VEC), one 16-byte access for 8 halves), and the
// launch is a 2-D grid, blockIdx.x the token and blockIdx.y a chunk of VEC * kBlock columns, kBlock = 256 threads
// each owning one vector of the chunk. input is [num_tokens, 2 * d] with the gate half first, out [num_tokens, d];
// out = silu(gate) * up computed in fp32 (silu(x) = x / (1 + __expf(-x))) and rounded to fp16 once, at the store.
// The host takes VEC = 8 when d % 8 == 0 (then the up half and every row start 16-byte aligned) and VEC = 1
// otherwise; the kernel still finishes any d % VEC elements past the last whole vector in a scalar tail loop.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace vllm {

constexpr int kBlock = 256;

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) AlignedVector {
  T val[VEC];
};

__device__ __forceinline__ float silu(const float x) { return x / (1.0f + __expf(-x)); }

/* kerntune:
args  = ["out: out f16[num_tokens * d]", "input: in f16[num_tokens * 2 * d]", "d: i32 = d"]
sizes = [{ num_tokens = 2048, d = 14336 }, { num_tokens = 4, d = 11008 }, { num_tokens = 1003, d = 5000 }]
grid  = ["num_tokens", "cdiv(d, 8 * 256)"]
block = 256
template_args = ["__half", "8"]
*/
template <typename T, int VEC>
__global__ void silu_and_mul_kernel(T* __restrict__ out,          // [num_tokens, d]
                                    const T* __restrict__ input,  // [num_tokens, 2, d]: gate, then up
                                    const int d) {
  using vec_t = AlignedVector<T, VEC>;
  const int64_t token_idx = blockIdx.x;
  const T* gate = input + token_idx * 2 * d;
  const T* up = gate + d;
  T* out_row = out + token_idx * d;

  const int num_vecs = d / VEC;
  const int vec_idx = blockIdx.y * blockDim.x + threadIdx.x;
  if (vec_idx < num_vecs) {
    const vec_t g = reinterpret_cast<const vec_t*>(gate)[vec_idx];
    const vec_t u = reinterpret_cast<const vec_t*>(up)[vec_idx];
    vec_t o;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      o.val[i] = static_cast<T>(silu(static_cast<float>(g.val[i])) * static_cast<float>(u.val[i]));
    }
    reinterpret_cast<vec_t*>(out_row)[vec_idx] = o;
  }

  // the d % VEC elements after the last whole vector (fewer than VEC), done once per token by chunk 0
  if (blockIdx.y == 0) {
    for (int idx = num_vecs * VEC + threadIdx.x; idx < d; idx += blockDim.x) {
      out_row[idx] = static_cast<T>(silu(static_cast<float>(gate[idx])) * static_cast<float>(up[idx]));
    }
  }
}

}  // namespace vllm

template <typename T, int VEC>
static void launch_silu_and_mul(T* out, const T* input, int64_t num_tokens, int d, cudaStream_t stream) {
  const int cols_per_block = VEC * vllm::kBlock;
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>((d + cols_per_block - 1) / cols_per_block));
  const dim3 block(vllm::kBlock);
  vllm::silu_and_mul_kernel<T, VEC><<<grid, block, 0, stream>>>(out, input, d);
}

// out: [num_tokens, d]; input: [num_tokens, 2 * d] (gate | up), both contiguous fp16.
void silu_and_mul(__half* out, const __half* input, int64_t num_tokens, int d, cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return;
  if (d % 8 == 0) {
    launch_silu_and_mul<__half, 8>(out, input, num_tokens, d, stream);
  } else {
    launch_silu_and_mul<__half, 1>(out, input, num_tokens, d, stream);
  }
}
