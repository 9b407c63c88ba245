// Per-token symmetric int8 quantization of W8A8 (SmoothQuant-style) activations whose dequantization scale is kept in
// the activations' own 16-bit type, times a caller's factor: scale = max(absmax / 127, 1e-6) (the floor on the
// scale), q = int8(rint(x / scale)) by a true division, scales[token] = bf16(scale * scale_factor) to nearest even.
// A warp per token on threadIdx.y (block (32, 4), grid cdiv(tokens, 4)), int sizes, the outputs first, bf16 pairs
// read twice, a shuffle-down tree and a lane-0 broadcast; the scale handed to its store through a local.
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["q_out: out i8[num_tokens * hidden]", "scales: out bf16[num_tokens]", "x: in bf16[num_tokens * hidden]",
         "scale_factor: f32 = 1.0", "num_tokens: i32 = num_tokens", "hidden: i32 = hidden"]
sizes = [{ num_tokens = 2048, hidden = 4096 }, { num_tokens = 9, hidden = 5120 }, { num_tokens = 333, hidden = 1536 }]
grid  = "cdiv(num_tokens, 4)"
block = ["32", "4"]
*/
__global__ void act_quant_per_token_int8(int8_t* __restrict__ q_out, __nv_bfloat16* __restrict__ scales,
                                         const __nv_bfloat16* __restrict__ x, float scale_factor, int num_tokens,
                                         int hidden) {
  const int token = blockIdx.x * blockDim.y + threadIdx.y;
  if (token >= num_tokens) return;
  const __nv_bfloat162* row = reinterpret_cast<const __nv_bfloat162*>(x + (size_t)token * hidden);
  char2* qrow = reinterpret_cast<char2*>(q_out + (size_t)token * hidden);
  const int pairs = hidden / 2;

  float amax = 0.0f;
  for (int i = threadIdx.x; i < pairs; i += 32) {
    const float2 v = __bfloat1622float2(row[i]);
    amax = fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y)));
  }
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_down_sync(0xffffffff, amax, offset));
  amax = __shfl_sync(0xffffffff, amax, 0);

  const float s = fmaxf(amax / 127.0f, 1e-6f);
  const float stored = s * scale_factor;
  if (threadIdx.x == 0) scales[token] = __float2bfloat16_rn(stored);

  for (int i = threadIdx.x; i < pairs; i += 32) {
    const float2 v = __bfloat1622float2(row[i]);
    char2 o;
    o.x = static_cast<signed char>(rintf(v.x / s));
    o.y = static_cast<signed char>(rintf(v.y / s));
    qrow[i] = o;
  }
}

void act_quant_per_token_int8_launch(int8_t* q_out, __nv_bfloat16* scales, const __nv_bfloat16* x,
                                     float scale_factor, int num_tokens, int hidden, cudaStream_t stream) {
  const dim3 block(32, 4);
  const dim3 grid((num_tokens + 3) / 4);
  act_quant_per_token_int8<<<grid, block, 0, stream>>>(q_out, scales, x, scale_factor, num_tokens, hidden);
}
