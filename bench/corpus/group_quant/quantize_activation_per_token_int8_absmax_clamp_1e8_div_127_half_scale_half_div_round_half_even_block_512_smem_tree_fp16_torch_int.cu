// Dynamic per-token int8 activation quantization in the style of SmoothQuant's torch-int
// (Guangxuan-Xiao/torch-int, torch_int/kernels/quantization.cu quantize_activation_per_token, the W8A8 path of its
// OPT int8 layers), a CUDA port of the ATen expression that keeps its dtypes and roundings:
//   input [tokens, hidden] fp16 -> output [tokens, hidden] int8, scale [tokens, 1] fp16 (the scale tensor keeps
//   the input dtype: max_val = clamp(max_val, 1e-8) / 127.0 is an fp16 tensor)
//   q = clamp(input / max_val, -128, 127).round().to(int8): the division is an fp16 tensor op, so x / scale is
//   computed in float and ROUNDED TO FP16 before the clamp, then rounded half to even (torch.round) to int8
//   launch (ours: torch-int runs three ATen kernels): one block per token of a constexpr 512 threads striding the
//   row, the absolute maximum reduced in a __shared__ float[512] halving tree, thread 0 writing the fp16 scale to
//   shared memory and to global, a second pass over the row quantizing
// Argument order input, output, scale, hidden (torch-int returns (quantized, max_val)). Fixed: the original takes
// input.max(1) -- the SIGNED maximum -- so a row whose largest magnitude is negative gets a scale too small and
// its negative outliers clamp to -128; the port takes the absolute maximum (as SmoothQuant's fake quantizer
// quantize_activation_per_token_absmax does). clamp(1e-8) in fp16 is a flush to 0 for tiny rows, kept.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

constexpr int kQuantThreads = 512;

/* kerntune:
args  = ["input: in f16[tokens * hidden]", "output: out i8[tokens * hidden]", "scale: out f16[tokens]",
         "hidden: i32 = hidden"]
sizes = [{ tokens = 8192, hidden = 4096 }, { tokens = 4, hidden = 7168 }, { tokens = 999, hidden = 2049 }]
grid  = "tokens"
block = 512
*/
__global__ void quantize_activation_per_token_kernel(const __half* __restrict__ input, int8_t* __restrict__ output,
                                                     __half* __restrict__ scale, int hidden) {
  __shared__ float s_max[kQuantThreads];
  __shared__ __half s_scale;

  const int64_t row = blockIdx.x;
  const __half* x = input + row * hidden;
  int8_t* q = output + row * hidden;

  float local_max = 0.f;
  for (int i = threadIdx.x; i < hidden; i += kQuantThreads) {
    local_max = fmaxf(local_max, fabsf(__half2float(x[i])));
  }
  s_max[threadIdx.x] = local_max;
  __syncthreads();
  for (int stride = kQuantThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      s_max[threadIdx.x] = fmaxf(s_max[threadIdx.x], s_max[threadIdx.x + stride]);
    }
    __syncthreads();
  }

  if (threadIdx.x == 0) {
    // max_val = torch.clamp(max_val, 1e-8) / 127.0, both fp16 tensor ops
    const __half clamped = __float2half(fmaxf(s_max[0], __half2float(__float2half(1e-8f))));
    const __half sc = __float2half(__half2float(clamped) / 127.0f);
    s_scale = sc;
    scale[row] = sc;
  }
  __syncthreads();

  const float sc = __half2float(s_scale);
  for (int i = threadIdx.x; i < hidden; i += kQuantThreads) {
    const float v = __half2float(__float2half(__half2float(x[i]) / sc));  // input / max_val, an fp16 result
    const float c = fminf(fmaxf(v, -128.f), 127.f);
    q[i] = static_cast<int8_t>(rintf(c));
  }
}

// input: device [tokens, hidden] fp16; output: device [tokens, hidden] int8; scale: device [tokens, 1] fp16.
void quantize_activation_per_token(const __half* input, int8_t* output, __half* scale, int tokens, int hidden,
                                   cudaStream_t stream) {
  quantize_activation_per_token_kernel<<<tokens, kQuantThreads, 0, stream>>>(input, output, scale, hidden);
}
