// Rotary embedding in the style of Fast-LLM (ServiceNow/Fast-LLM, fast_llm/functional/triton/rotary.py:
// triton_rotary_kernel behind triton_rotary_ / triton_rotary_autograd_, the frequencies from get_rotary_frequencies
// (complex_format=False) in fast_llm/functional/rotary.py; ServiceNow's LLM training library with its own Triton
// kernels), written as the CUDA port of that Triton program, on the key_value call (is_key_value=True):
//   The attention layer keeps keys and values in ONE tensor key_value [batch, seq, 2 * kv_heads, head_size] (bf16);
//   the kernel rotates the KEYS IN PLACE, the first kv_heads heads of each token (input_.chunk(2, dim=-2)[0], a view
//   whose head stride is head_size and token stride 2 * kv_heads * head_size), the values untouched. The checkpoint
//   converter permutes the query / key weights from the complex (interleaved) format to the "real" one, so the
//   kernel pairs the two HALVES: re = x[c], im = x[rotary_dim + c], rotary_dim = head_size / 2. Frequencies fp32
//   [seq, head_size] per position: cos of the rotary_dim frequencies, THEN their sin (convert_rotary_complex_to_real
//   of polar(1, n * theta^(-2c / kv_channels)) built in float64); positions IMPLICIT: position_id = pid_0 % seq_len,
//   the batch pid_0 / seq_len (no position ids). fp32 math, out_re = cos * re - sin * im, out_im = cos * im +
//   sin * re (the backward flag flips the sin signs), one rounding to bf16, stored in place.
//   One program per (batch * seq, head block): grid (batch * seq_len, cdiv(kv_heads, head_block_size)) with
//   rotary_block_size = next_power_of_2(rotary_dim) and head_block_size = cdiv(POINTWISE_BLOCK_SIZE = 1024,
//   rotary_block_size), lowered to next_power_of_2(kv_heads) when larger (8 here); Triton's default 4 warps: the
//   [head_block_size, rotary_block_size] = [8, 64] tile in Triton's blocked layout, 4 consecutive columns of one
//   head row per thread; unmasked loads and stores when rotary_block_size == rotary_dim and the head block divides
//   kv_heads (Triton's constexpr test, a runtime one here), else masked to the real heads and columns.
//   Template <T, rotary_block_size, head_block_size, backward> (spec <bf16, 64, 8, false>).
// Fixed: (1) the frequency loads are NOT masked in Fast-LLM: with rotary_dim < rotary_block_size (head_size 80, 96,
// 160, ...) the sin load freq_base[rotary_dim + c] for c up to rotary_block_size - 1 runs past the position's row,
// and for the last position of the table past the end of the frequencies: masked to c < rotary_dim here (the lanes
// it drops are never stored); (2) the offsets are int32 products in Triton (the code's own "TODO: Int64 ptr if
// needed?"), wrapping past 2^31 elements of key_value: 64-bit here.
// Changed: rotary_dim, num_heads and seq_len (constexprs, recompiled per value) are runtime arguments; the Python
// wrapper became a C++ launcher with device pointers, sizes, the is_key_value / backward flags and a stream (bf16
// and fp16 instantiated); the query call (is_key_value=False) is the same kernel on the query tensor.
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace fast_llm {

constexpr int kNumWarps = 4;  // triton_rotary_kernel[grid](...) without num_warps: Triton's default
constexpr int kThreads = kNumWarps * 32;
constexpr int POINTWISE_BLOCK_SIZE = 1024;  // TritonConfig.POINTWISE_BLOCK_SIZE

__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half(v); }

/* kerntune:
args  = ["input_ptr: inout bf16[B * S * 2 * H * D]", "frequencies_ptr: in f32[S * D] ~ uniform(-1, 1)",
         "stride_0: i64 = S * 2 * H * D", "stride_1: i64 = 2 * H * D", "stride_2: i64 = D",
         "rotary_dim: i32 = D / 2", "num_heads: i32 = H", "seq_len: i32 = S"]
sizes = [{ B = 4, S = 4096, H = 8, D = 128 }, { B = 4, S = 1, H = 8, D = 128 }, { B = 3, S = 1001, H = 5, D = 80 }]
grid  = ["B * S", "cdiv(H, 8)"]
block = 128
bytes = "B * S * H * D * 2 * 2 + S * D * 4"
template_args = ["__nv_bfloat16", "64", "8", "false"]
*/
template <typename T, int ROTARY_BLOCK_SIZE, int HEAD_BLOCK_SIZE, bool BACKWARD>
__global__ void __launch_bounds__(kThreads)
    triton_rotary_kernel(T* input_ptr, const float* frequencies_ptr, int64_t stride_0, int64_t stride_1,
                         int64_t stride_2, int rotary_dim, int num_heads, int seq_len) {
  constexpr int TILE = HEAD_BLOCK_SIZE * ROTARY_BLOCK_SIZE;
  constexpr int PER = TILE >= kThreads ? TILE / kThreads : 1;  // consecutive columns per thread
  static_assert(ROTARY_BLOCK_SIZE % PER == 0, "a thread's columns stay in one head row");

  const int pid_0 = blockIdx.x;  // Folded (batch * seq) index
  const int pid_1 = blockIdx.y;  // Head block index
  const int position_id = pid_0 % seq_len;

  // fixed: 64-bit offsets
  const int64_t base = stride_0 * (int64_t)(pid_0 / seq_len) + stride_1 * (int64_t)position_id;
  const bool unmasked = (ROTARY_BLOCK_SIZE % rotary_dim == 0) && (num_heads % HEAD_BLOCK_SIZE == 0);
  const float* freq_base = frequencies_ptr + (int64_t)2 * rotary_dim * position_id;

#pragma unroll
  for (int k = 0; k < PER; ++k) {
    const int f = threadIdx.x * PER + k;
    if (f >= TILE) break;  // a tile smaller than the CTA
    const int col = f % ROTARY_BLOCK_SIZE;
    const int head_row = pid_1 * HEAD_BLOCK_SIZE + f / ROTARY_BLOCK_SIZE;
    const bool mask = unmasked || (col < rotary_dim && head_row < num_heads);

    // Load re and im halves separately
    const int64_t re_offset = base + stride_2 * head_row + col;
    const int64_t im_offset = re_offset + rotary_dim;
    const float x_re = mask ? to_f32(input_ptr[re_offset]) : 0.0f;
    const float x_im = mask ? to_f32(input_ptr[im_offset]) : 0.0f;

    // fixed: the frequency loads masked to the row's rotary_dim columns
    const bool freq_mask = col < rotary_dim;
    const float freq_re = freq_mask ? freq_base[col] : 0.0f;
    const float freq_im = freq_mask ? freq_base[rotary_dim + col] : 0.0f;

    // fwd: out_re = cos*re - sin*im,  out_im = cos*im + sin*re
    // bwd: conjugate rotation, sin signs flipped
    float out_re, out_im;
    if (BACKWARD) {
      out_re = x_re * freq_re + x_im * freq_im;
      out_im = x_im * freq_re - x_re * freq_im;
    } else {
      out_re = x_re * freq_re - x_im * freq_im;
      out_im = x_im * freq_re + x_re * freq_im;
    }

    if (mask) {
      input_ptr[re_offset] = from_f32<T>(out_re);
      input_ptr[im_offset] = from_f32<T>(out_im);
    }
  }
}

template <typename T, int RB, int HB>
static void launch_hb(T* x, const float* frequencies, int batch, int seq_len, int num_heads, int64_t stride_0,
                      int64_t stride_1, int64_t stride_2, int rotary_dim, bool backward, cudaStream_t stream) {
  // Folded the large y dim into the x dim as gridDim.x is 32 bit while gridDim.y and gridDim.z are 16 bit
  const dim3 grid(batch * seq_len, (num_heads + HB - 1) / HB);
  if (backward)
    triton_rotary_kernel<T, RB, HB, true><<<grid, kThreads, 0, stream>>>(x, frequencies, stride_0, stride_1, stride_2,
                                                                         rotary_dim, num_heads, seq_len);
  else
    triton_rotary_kernel<T, RB, HB, false><<<grid, kThreads, 0, stream>>>(x, frequencies, stride_0, stride_1,
                                                                          stride_2, rotary_dim, num_heads, seq_len);
}

template <typename T, int RB>
static void launch_rb(T* x, const float* frequencies, int batch, int seq_len, int num_heads, int64_t stride_0,
                      int64_t stride_1, int64_t stride_2, int rotary_dim, bool backward, cudaStream_t stream) {
  int head_block_size = (POINTWISE_BLOCK_SIZE + RB - 1) / RB;  // triton.cdiv(POINTWISE_BLOCK_SIZE, rotary_block)
  if (head_block_size > num_heads) {
    head_block_size = 1;  // triton.next_power_of_2(num_heads)
    while (head_block_size < num_heads) head_block_size *= 2;
  }
  switch (head_block_size) {
    case 1: launch_hb<T, RB, 1>(x, frequencies, batch, seq_len, num_heads, stride_0, stride_1, stride_2, rotary_dim, backward, stream); break;
    case 2: launch_hb<T, RB, 2>(x, frequencies, batch, seq_len, num_heads, stride_0, stride_1, stride_2, rotary_dim, backward, stream); break;
    case 4: launch_hb<T, RB, 4>(x, frequencies, batch, seq_len, num_heads, stride_0, stride_1, stride_2, rotary_dim, backward, stream); break;
    case 8: launch_hb<T, RB, 8>(x, frequencies, batch, seq_len, num_heads, stride_0, stride_1, stride_2, rotary_dim, backward, stream); break;
    case 16: launch_hb<T, RB, 16>(x, frequencies, batch, seq_len, num_heads, stride_0, stride_1, stride_2, rotary_dim, backward, stream); break;
    case 32: launch_hb<T, RB, 32>(x, frequencies, batch, seq_len, num_heads, stride_0, stride_1, stride_2, rotary_dim, backward, stream); break;
    default: assert(false && "head block size out of range");
  }
}

}  // namespace fast_llm

// input: device [batch, seq_len, num_heads, head_size] (last dim contiguous, the token rows `num_heads * head_size`
// apart); with is_key_value it is the fused key_value tensor (num_heads = 2 * kv_heads) and only its first half of
// the heads (the keys) is rotated. frequencies: fp32 [>= seq_len, head_size] in the real format (cos block, sin
// block). head_size in 33..256 and even.
template <typename T>
void triton_rotary_(T* input, const float* frequencies, int batch, int seq_len, int num_heads, int head_size,
                    bool is_key_value, bool backward, cudaStream_t stream) {
  assert(head_size % 2 == 0 && "div(head_size, 2)");
  const int64_t stride_0 = (int64_t)seq_len * num_heads * head_size;  // input_.stride(0)
  const int64_t stride_1 = (int64_t)num_heads * head_size;            // input_.stride(1)
  const int64_t stride_2 = head_size;                                 // input_.stride(2)
  if (is_key_value) num_heads /= 2;  // input_.chunk(2, dim=-2)[0]: the keys, same strides
  if (batch == 0 || seq_len == 0 || num_heads == 0) return;
  const int rotary_dim = head_size / 2;
  int rotary_block_size = 1;  // triton.next_power_of_2(rotary_dim)
  while (rotary_block_size < rotary_dim) rotary_block_size *= 2;
  switch (rotary_block_size) {
    case 32:
      fast_llm::launch_rb<T, 32>(input, frequencies, batch, seq_len, num_heads, stride_0, stride_1, stride_2,
                                 rotary_dim, backward, stream);
      break;
    case 64:
      fast_llm::launch_rb<T, 64>(input, frequencies, batch, seq_len, num_heads, stride_0, stride_1, stride_2,
                                 rotary_dim, backward, stream);
      break;
    case 128:
      fast_llm::launch_rb<T, 128>(input, frequencies, batch, seq_len, num_heads, stride_0, stride_1, stride_2,
                                  rotary_dim, backward, stream);
      break;
    default:
      assert(false && "head_size out of range");
  }
}

template void triton_rotary_<__nv_bfloat16>(__nv_bfloat16*, const float*, int, int, int, int, bool, bool,
                                            cudaStream_t);
template void triton_rotary_<__half>(__half*, const float*, int, int, int, int, bool, bool, cudaStream_t);
