// SwiGLU forward as Liger-Kernel's Triton LigerSiLUMulFunction computes it, ported to CUDA one Triton program per
// CUDA block: the gate a and the up projection b are two separate tensors [n_rows, n_cols] (the outputs of two
// GEMMs), c = silu(a) * b into a third; one row stride for all three (c.stride(-2)). Numerics exactly Liger's:
// a upcast to fp32, silu(a) = a * sigmoid(a) in fp32, CAST TO b's dtype (bf16) and then multiplied by b in bf16
// (two roundings: after the activation and after the product). Launch: grid n_rows, and the block from Liger's
// calculate_settings: BLOCK_SIZE = next_pow2(n_cols), num_warps 4 / 8 / 16 / 32 at BLOCK_SIZE 2048 / 8192 / 32768,
// computed by a constexpr function on the host; the block's threads stride the row's columns.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

constexpr int next_power_of_2(int n) { return n <= 1 ? 1 : 2 * next_power_of_2((n + 1) / 2); }

constexpr int calculate_num_warps(int block_size) {
  return block_size >= 32768 ? 32 : block_size >= 8192 ? 16 : block_size >= 2048 ? 8 : 4;
}

__device__ __forceinline__ float silu(float x) { return x * (1.0f / (1.0f + expf(-x))); }

/* kerntune:
args  = ["a_ptr: in bf16[n_rows * n_cols]", "b_ptr: in bf16[n_rows * n_cols]", "c_ptr: out bf16[n_rows * n_cols]",
         "stride: i64 = n_cols", "n_cols: i32 = n_cols"]
sizes = [{ n_rows = 4096, n_cols = 14336 }, { n_rows = 4, n_cols = 14336 }, { n_rows = 77, n_cols = 2731 }]
grid  = "n_rows"
block = "32 * (32 if n_cols > 16384 else 16 if n_cols > 4096 else 8 if n_cols > 1024 else 4)"
*/
__global__ void swiglu_forward_kernel(const __nv_bfloat16* a_ptr, const __nv_bfloat16* b_ptr, __nv_bfloat16* c_ptr,
                                      const int64_t stride, const int n_cols) {
  const int64_t program_id = blockIdx.x;
  a_ptr += program_id * stride;
  b_ptr += program_id * stride;
  c_ptr += program_id * stride;

  for (int col = threadIdx.x; col < n_cols; col += blockDim.x) {
    const float a_row = __bfloat162float(a_ptr[col]);
    const __nv_bfloat16 b_row = b_ptr[col];
    const __nv_bfloat16 act = __float2bfloat16(silu(a_row));
    c_ptr[col] = __hmul(act, b_row);
  }
}

// Host side (LigerSiLUMulFunction.forward on a, b flattened to [n_rows, n_cols]): device pointers, contiguous.
void swiglu_forward(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int n_rows, int n_cols,
                    cudaStream_t stream) {
  const int block_size = next_power_of_2(n_cols);
  const int num_warps = calculate_num_warps(block_size);
  swiglu_forward_kernel<<<n_rows, 32 * num_warps, 0, stream>>>(a, b, c, n_cols, n_cols);
}
