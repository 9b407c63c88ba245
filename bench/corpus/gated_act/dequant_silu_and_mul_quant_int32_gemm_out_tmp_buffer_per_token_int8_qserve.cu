// Dequantize + SiLU-and-mul + per-token int8 quantization as MIT Han Lab's QServe (OmniServe's W8A8 path;
// kernels/csrc/activation_kernels.cu, dequant_silu_and_mul_quant_kernel<scale_type, use_per_token_quant> behind
// invoke_dequant_silu_and_mul_quant, the SmoothQuant-style fused activation between the int8 gate_up GEMM and the int8
// down GEMM):
//   input is the int32 accumulator of the gate_up GEMM [tokens, 2 * d], gate half first; x = int * scale_gate,
//   y = int * scale_up (two per-tensor float scales as arguments), t = silu(x) * y with silu = x / (1 + expf(-x))
//   per-token path (QServe's <float*, true> instance): t is stored to a caller-provided fp32 scratch
//   tmp [tokens, d] and re-read from global memory in the second loop (same thread, same index), |t| max per token by
//   blockReduceMax (xor-shuffle warps, static __shared__ float[32], -1e20f filler, blockDim.x / 32.f bound), thread 0
//   writes scale_out[token] = amax / 127 and a __shared__ s_amax; out = float_to_int8_rn(127 / amax * t) by PTX
//   cvt.rni.sat.s8.f32; the amax starts at 0 with no floor
//   one token per block, block = min(d, 1024), a threadIdx.x-strided loop over d; int (not int64) token offsets
// Written as the per-token instance only: QServe's template over scale_type (float* here, a plain float static scale
// in its per-tensor instance) and the use_per_token_quant if-constexpr are folded into a float* parameter, the
// per-tensor branch left out. The torch::Tensor plumbing is replaced by raw pointers and counts.
#include <cuda_runtime.h>
#include <stdint.h>
#include <algorithm>

namespace vllm {

template <typename T>
__inline__ __device__ T warpReduceMax(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1)
    val = max(val, __shfl_xor_sync(0xffffffff, val, mask, 32));
  return val;
}

// Calculate the maximum of all elements in a block
template <typename T>
__inline__ __device__ T blockReduceMax(T val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  val = warpReduceMax<T>(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();

  // blockDim.x / 32.f keeps a partial last warp's value
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : (T)(-1e20f);
  val = warpReduceMax<T>(val);
  return val;
}

static inline __device__ int8_t float_to_int8_rn(float x) {
  uint32_t dst;
  asm volatile("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(dst) : "f"(x));
  return reinterpret_cast<const int8_t &>(dst);
}

template <typename T> __device__ __forceinline__ T silu(const T &x) {
  // x * sigmoid(x)
  return (T)(((float)x) / (1.0f + expf((float)-x)));
}

/* kerntune:
args  = ["out: out i8[num_tokens * d]", "input: in i32[num_tokens * 2 * d] ~ randint(-20000, 20000)", "d: i32 = d",
         "scale_gate: f32 = 0.0002", "scale_up: f32 = 0.00015", "scale_out: out f32[num_tokens]",
         "tmp: out f32[num_tokens * d]"]
sizes = [{ num_tokens = 2048, d = 11008 }, { num_tokens = 4, d = 11008 }, { num_tokens = 1001, d = 5461 }]
grid  = "num_tokens"
block = "min(d, 1024)"
*/
// dequant int32 input, apply silu and mul, then quantize per token to int8
__global__ void dequant_silu_and_mul_quant_kernel(
    int8_t *__restrict__ out,          // [..., d]
    const int32_t *__restrict__ input, // [..., 2 * d]
    const int d, const float scale_gate, const float scale_up,
    float *__restrict__ scale_out,     // [num_tokens]
    float *__restrict__ tmp            // [num_tokens, d]
) {
  const int token_idx = blockIdx.x;
  float amax_val = 0.0f;
  const float zero = 0.0f;

  for (int idx = threadIdx.x; idx < d; idx += blockDim.x) {
    const float x = (float)__ldg(&input[token_idx * 2 * d + idx]) * scale_gate;
    const float y = (float)__ldg(&input[token_idx * 2 * d + d + idx]) * scale_up;
    float t = silu(x) * y;
    tmp[token_idx * d + idx] = t;
    t = t > zero ? t : -t;
    if (t > amax_val) amax_val = t;
  }

  __shared__ float s_amax;
  const float block_amax_val = blockReduceMax(amax_val);
  if (threadIdx.x == 0) {
    s_amax = block_amax_val;
    scale_out[token_idx] = block_amax_val / 127.0f;
  }
  __syncthreads();

  float tmp_scale = 127.0f / s_amax;
  for (int idx = threadIdx.x; idx < d; idx += blockDim.x) {
    out[token_idx * d + idx] = float_to_int8_rn(tmp_scale * tmp[token_idx * d + idx]);
  }
}

}  // namespace vllm

// out: [num_tokens, d] int8; input: [num_tokens, 2 * d] int32; scale_out: [num_tokens] float; tmp: [num_tokens, d].
void invoke_dequant_silu_and_mul_quant(int8_t *out, const int32_t *input, int64_t num_tokens, int d,
                                       const float scale_gate, const float scale_up, float *scale_out, float *tmp,
                                       cudaStream_t stream) {
  dim3 grid(num_tokens);
  dim3 block(std::min(d, 1024));
  vllm::dequant_silu_and_mul_quant_kernel<<<grid, block, 0, stream>>>(
      out, input, d, scale_gate, scale_up, scale_out, tmp);
}
