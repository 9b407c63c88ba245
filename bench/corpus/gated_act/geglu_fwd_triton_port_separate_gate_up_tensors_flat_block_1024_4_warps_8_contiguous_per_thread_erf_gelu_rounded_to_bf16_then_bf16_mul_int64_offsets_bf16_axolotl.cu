// GEGLU forward in the style of Axolotl (axolotl-ai-cloud/axolotl, src/axolotl/kernels/geglu.py: the Triton kernel
// _geglu_fwd_kernel launched by geglu_forward(gate, up), used by the LoRA MLP kernels of src/axolotl/kernels/lora.py
// for GEGLU models (Gemma); Axolotl is a fine-tuning framework), written as the CUDA port of that Triton program:
//   gate and up are TWO SEPARATE tensors [batch, seq_len, hidden_dim] (the outputs of the gate and up projections,
//   not one [.., 2 * d] buffer), out [batch, seq_len, hidden_dim] a new tensor; everything is addressed as ONE FLAT
//   range of n_elements = gate.numel() (the row structure is never used).
//   One program per BLOCK_SIZE = 1024 elements (geglu_forward passes BLOCK_SIZE=1024), grid cdiv(n_elements, 1024),
//   Triton's default num_warps = 4 (128 threads): in Triton's blocked layout with 16-byte bf16 accesses each thread
//   holds 8 contiguous elements of the program's range (thread t: [8t, 8t + 8)); loads masked at n_elements, other=0.
//   Numerics as the Triton code runs them: gate.to(float32), gelu = 0.5 * gate * (erf(rsqrt(2) * gate) + 1) (exact
//   erf GELU) in fp32, gelu.to(up.dtype) ROUNDED TO BF16, then gelu_bf16 * up multiplied in bf16 (up is never
//   upcast: a second rounding, __hmul here).
//   Port: the 8 elements of a thread are one 16-byte access when all 8 are in range and the three pointers are
//   16-byte aligned (checked at run time), else scalar masked accesses.
// Fixed: offsets = pid * BLOCK_SIZE + arange(BLOCK_SIZE) is an int32 product in Triton (program_id is i32 and
// BLOCK_SIZE a constexpr), so past 2^31 elements (a 4 x 32768-token batch of a 16384-wide Gemma MLP: 2.1e9) the
// offsets wrap and the kernel reads and writes out of bounds; unsloth's kernel this one credits switches to int64
// (LONG_INDEXING) there, Axolotl's does not. n_elements and every offset are 64-bit here.
// Changed: the Python wrapper became a C++ launcher with device pointers, sizes and a stream.
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace axolotl {

constexpr int kBlockSize = 1024;  // BLOCK_SIZE=1024 in geglu_forward
constexpr int kNumWarps = 4;      // Triton's default num_warps
constexpr float kRsqrt2 = 0.70710678118654752f;  // tl.math.rsqrt(2.0)

template <typename T>
__device__ __forceinline__ T geglu_one(T gate, T up) {
  const float g = static_cast<float>(gate);
  const float gelu_gate = 0.5f * g * (erff(kRsqrt2 * g) + 1.0f);
  return __hmul(T(gelu_gate), up);  // gelu_gate.to(up.dtype) * up
}

/* kerntune:
args  = ["gate_ptr: in bf16[batch * seq * hidden]", "up_ptr: in bf16[batch * seq * hidden]",
         "out_ptr: out bf16[batch * seq * hidden]", "n_elements: i64 = batch * seq * hidden"]
sizes = [{ batch = 1, seq = 4096, hidden = 14336 }, { batch = 4, seq = 1, hidden = 14336 },
         { batch = 1, seq = 1001, hidden = 6913 }]
grid  = "cdiv(batch * seq * hidden, 1024)"
block = 128
template_args = ["__nv_bfloat16", "1024", "4"]
*/
template <typename T, int BLOCK_SIZE, int NUM_WARPS>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    _geglu_fwd_kernel(const T* gate_ptr, const T* up_ptr, T* out_ptr, int64_t n_elements) {
  constexpr int THREADS = NUM_WARPS * 32;
  constexpr int VEC = 16 / sizeof(T);                 // elements of one 16-byte access
  constexpr int PER_THREAD = BLOCK_SIZE / THREADS;    // elements of the block a thread holds
  static_assert(PER_THREAD % VEC == 0, "a thread holds whole 16-byte runs");
  constexpr int RUNS = PER_THREAD / VEC;

  const int64_t block_idx = blockIdx.x;
  const int64_t block_start = block_idx * BLOCK_SIZE;  // 64-bit (fixed)
  const bool aligned = ((reinterpret_cast<uintptr_t>(gate_ptr) | reinterpret_cast<uintptr_t>(up_ptr) |
                         reinterpret_cast<uintptr_t>(out_ptr)) & 15) == 0;

#pragma unroll
  for (int r = 0; r < RUNS; ++r) {
    const int64_t off = block_start + (int64_t)(r * THREADS + threadIdx.x) * VEC;
    if (aligned && off + VEC <= n_elements) {
      const uint4 g4 = *reinterpret_cast<const uint4*>(gate_ptr + off);
      const uint4 u4 = *reinterpret_cast<const uint4*>(up_ptr + off);
      const T* g = reinterpret_cast<const T*>(&g4);
      const T* u = reinterpret_cast<const T*>(&u4);
      uint4 o4;
      T* o = reinterpret_cast<T*>(&o4);
#pragma unroll
      for (int j = 0; j < VEC; ++j) o[j] = geglu_one(g[j], u[j]);
      *reinterpret_cast<uint4*>(out_ptr + off) = o4;
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int64_t i = off + j;
        if (i < n_elements) out_ptr[i] = geglu_one(gate_ptr[i], up_ptr[i]);
      }
    }
  }
}

}  // namespace axolotl

// geglu_forward(gate, up): gate, up device [batch, seq_len, hidden_dim] (contiguous), out the same shape.
template <typename T>
void geglu_forward(const T* gate, const T* up, T* out, int batch, int seq_len, int hidden_dim, cudaStream_t stream) {
  const int64_t n_elements = (int64_t)batch * seq_len * hidden_dim;
  if (n_elements == 0) return;
  const int64_t grid = (n_elements + axolotl::kBlockSize - 1) / axolotl::kBlockSize;
  assert(grid <= 0x7fffffff);
  axolotl::_geglu_fwd_kernel<T, axolotl::kBlockSize, axolotl::kNumWarps>
      <<<(unsigned)grid, axolotl::kNumWarps * 32, 0, stream>>>(gate, up, out, n_elements);
}

template void geglu_forward<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, int, int, int,
                                           cudaStream_t);
template void geglu_forward<__half>(const __half*, const __half*, __half*, int, int, int, cudaStream_t);
