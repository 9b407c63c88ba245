// Rotary embedding as Hugging Face candle's CUDA kernels (and the Rust servers built on them: mistral.rs,
// text-embeddings-inference) write it: a templated __device__ function doing the work, called by one extern "C"
// __global__ entry point per dtype (the names a Rust host loads from the PTX: rope_f32, rope_f16, rope_bf16).
// Non-interleaved (NeoX / rotate_half) pairs (i, i + d / 2) over the whole head, one tensor at a time (q or k), laid
// out HEAD-MAJOR as the model keeps it after the transpose: src, dst [b, h, t, d]; no position ids:
// cos, sin [t, d / 2] are the rows of the cache the caller already narrowed to the positions of these t tokens
// (shared by every batch and head). The arithmetic is in the storage type: for bf16 each product and each sum is a
// bf16 operator (rounded to bf16), dst[i1] = x1 * c - x2 * s, dst[i2] = x1 * s + x2 * c.
// Launch as candle's LaunchConfig::for_num_elems(b * h * t * d / 2): one thread per pair over a flat 32-bit index,
// 1024 threads, ceil(n / 1024) blocks; sizes as uint32_t bh = b * h, td = t * d and d.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>

template <typename T>
__device__ void rope(const T* src, const T* cos, const T* sin, T* dst, const uint32_t bh, const uint32_t td,
                     const uint32_t d) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (2 * idx >= bh * td) return;

  const uint32_t i_bh = idx / (td / 2);
  const uint32_t i_td = idx - (td / 2) * i_bh;
  const uint32_t i_t = i_td / (d / 2);
  const uint32_t i_d = i_td - (d / 2) * i_t;
  const uint32_t i1 = i_bh * td + i_t * d + i_d;
  const uint32_t i2 = i1 + d / 2;
  const uint32_t i_cs = i_t * (d / 2) + i_d;
  const T c = cos[i_cs];
  const T s = sin[i_cs];

  dst[i1] = src[i1] * c - src[i2] * s;
  dst[i2] = src[i1] * s + src[i2] * c;
}

extern "C" __global__ void rope_f32(const float* src, const float* cos, const float* sin, float* dst,
                                    const uint32_t bh, const uint32_t td, const uint32_t d) {
  rope<float>(src, cos, sin, dst, bh, td, d);
}

extern "C" __global__ void rope_f16(const __half* src, const __half* cos, const __half* sin, __half* dst,
                                    const uint32_t bh, const uint32_t td, const uint32_t d) {
  rope<__half>(src, cos, sin, dst, bh, td, d);
}

/* kerntune:
args  = ["src: in bf16[b * h * t * d]", "cos: in bf16[t * d / 2] ~ uniform(-1, 1)",
         "sin: in bf16[t * d / 2] ~ uniform(-1, 1)", "dst: out bf16[b * h * t * d]", "bh: u32 = b * h",
         "td: u32 = t * d", "d: u32 = d"]
sizes = [{ b = 2, h = 32, t = 4096, d = 128 }, { b = 16, h = 32, t = 1, d = 128 }, { b = 3, h = 7, t = 333, d = 80 }]
grid  = "cdiv(b * h * t * d / 2, 1024)"
block = 1024
*/
extern "C" __global__ void rope_bf16(const __nv_bfloat16* src, const __nv_bfloat16* cos, const __nv_bfloat16* sin,
                                     __nv_bfloat16* dst, const uint32_t bh, const uint32_t td, const uint32_t d) {
  rope<__nv_bfloat16>(src, cos, sin, dst, bh, td, d);
}

// The host side as candle-nn's rotary_emb does it (there in Rust): src, dst [b, h, t, d]; cos, sin [t, d / 2].
// Device pointers; d even.
void candle_rope_bf16(const __nv_bfloat16* src, const __nv_bfloat16* cos, const __nv_bfloat16* sin,
                      __nv_bfloat16* dst, uint32_t b, uint32_t h, uint32_t t, uint32_t d, cudaStream_t stream) {
  const uint32_t el = b * h * t * d;
  const uint32_t num_elems = el / 2;
  const uint32_t block_dim = 1024;
  const uint32_t grid_dim = (num_elems + block_dim - 1) / block_dim;
  rope_bf16<<<grid_dim, block_dim, 0, stream>>>(src, cos, sin, dst, b * h, t * d, d);
}
