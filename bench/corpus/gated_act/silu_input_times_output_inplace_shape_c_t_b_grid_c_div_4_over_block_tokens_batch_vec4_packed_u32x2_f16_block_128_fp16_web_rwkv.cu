// Gated SiLU as web-rwkv writes it (cryscan/web-rwkv, src/shaders/silu.wgsl `silu`, dispatched by the
// TensorOp::silu of its tensor ops; the gate of the RWKV v5 / v6 time mix, out = silu(g) * out), a WebGPU
// inference engine for RWKV whose compute shaders are WGSL. Ported to CUDA C++ as the shader is written: tensors
// laid out (B, T, C) with C fastest, the uniform shape vec4<u32> [C, T, B]; IN PLACE on the second tensor:
// output = silu(input) * output. Both sides fp16 (the IN_FP16 / OUT_FP16 variant), stored as array<vec2<u32>>:
// one thread owns 4 channels packed in two u32 (pack2x16float / unpack2x16float), computed in f32 as
// x / (1 + exp(-x)) * y and packed back once (one rounding). Workgroup BLOCK_SIZE = 128 threads along C / 4,
// dispatch (ceil(C / 4 / 128), T, B): global_invocation_id.x is the vec4 index, .y the token, .z the batch, and
// threads past C / 4 return. Argument order (shape, input, output).
// Changed: WGSL spelled as CUDA (the uniform vec4 becomes three u32 by value, vec2<u32> becomes uint2 read
// through __half2, exp is expf), the token / batch offset is formed in 64 bits (u32 in the shader); the host
// launcher stands in for web-rwkv's TensorOp dispatch and, as web-rwkv's shape checks do, requires C % 4 == 0 (the
// shader silently skips a remainder). No race or bug found. Sizes: C 4096 x T 8192 x B 2, decode 4096 x 1 x 4,
// 2564 x 333 x 3 (641 vectors per token, the last block partly idle).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

#define BLOCK_SIZE 128

static __device__ __forceinline__ uint2 pack4x16float(float4 x) {
  __half2 lo = __floats2half2_rn(x.x, x.y);
  __half2 hi = __floats2half2_rn(x.z, x.w);
  return make_uint2(*reinterpret_cast<unsigned*>(&lo), *reinterpret_cast<unsigned*>(&hi));
}

static __device__ __forceinline__ float4 unpack4x16float(uint2 x) {
  float2 lo = __half22float2(*reinterpret_cast<__half2*>(&x.x));
  float2 hi = __half22float2(*reinterpret_cast<__half2*>(&x.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

/* kerntune:
args  = ["shape_c: u32 = C", "shape_t: u32 = T", "shape_b: u32 = B", "input: in f16[B * T * C]",
         "output: inout f16[B * T * C]"]
sizes = [{ C = 4096, T = 8192, B = 2 }, { C = 4096, T = 1, B = 4 }, { C = 2564, T = 333, B = 3 }]
grid  = ["cdiv(C / 4, 128)", "T", "B"]
block = 128
*/
__global__ void __launch_bounds__(BLOCK_SIZE) silu(unsigned shape_c, unsigned shape_t, unsigned shape_b,
                                                   const uint2* __restrict__ input, uint2* __restrict__ output) {
  const unsigned stride = shape_c / 4u;
  const unsigned index = blockIdx.x * BLOCK_SIZE + threadIdx.x;
  const unsigned token = blockIdx.y;
  const unsigned batch = blockIdx.z;

  if (index < stride) {
    const uint64_t bti = ((uint64_t)batch * shape_t + token) * stride + index;
    const float4 x = unpack4x16float(input[bti]);
    const float4 y = unpack4x16float(output[bti]);
    float4 out;
    out.x = x.x / (1.0f + expf(-x.x)) * y.x;
    out.y = x.y / (1.0f + expf(-x.y)) * y.y;
    out.z = x.z / (1.0f + expf(-x.z)) * y.z;
    out.w = x.w / (1.0f + expf(-x.w)) * y.w;
    output[bti] = pack4x16float(out);
  }
}

// output (B, T, C) fp16 = silu(input) * output, in place. Returns -1 unless C is a multiple of 4.
int web_rwkv_silu(const __half* input, __half* output, unsigned C, unsigned T, unsigned B, cudaStream_t stream) {
  if (C % 4 != 0) {
    return -1;
  }
  const unsigned stride = C / 4;
  dim3 grid((stride + BLOCK_SIZE - 1) / BLOCK_SIZE, T, B);
  dim3 block(BLOCK_SIZE, 1, 1);
  silu<<<grid, block, 0, stream>>>(C, T, B, reinterpret_cast<const uint2*>(input), reinterpret_cast<uint2*>(output));
  return 0;
}
