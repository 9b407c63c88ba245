// SwiGLU as OrinMLLM writes its fp16 path (yhwang-hub/OrinMLLM, an LLM / VLM inference engine for Jetson Orin grown
// out of KuiperLLama: kuiper/source/op/kernels/cuda/swiglu_kernel.cu, swiglu_kernel_cu_fp16_vec dispatched by
// swiglu_kernel_cu when input1, input2 and output are all fp16; Kuiper's own kernel is an fp32 one staged through
// shared memory, this is OrinMLLM's rewrite). Two separate tensors of the same flat size: in1 the gate (the w1
// projection), in2 the up projection (w3), out = silu(in1) * in2, argument order (size, in1, in2, out). Flat
// index: each thread owns 8 consecutive halves, idx = (threadIdx.x + blockDim.x * blockIdx.x) * 8; a full group is
// loaded as one float4 (128 bits) per input, reinterpreted as 4 half2, widened with __half22float2, computed in
// fp32 as x * __fdividef(1, 1 + __expf(-x)) * y and packed back with __float22half2_rn into one float4 store; the
// last partial group (size % 8 values) takes a scalar tail loop with __half2float / __float2half. Launch:
// constexpr 256 threads (__launch_bounds__(256), "for better occupancy on Orin (SM 8.7)"), blocks =
// cdiv(size, 256 * 8), the stream taken as void* and launched on the default stream when it is null. No bug found
// (idx is a multiple of 8 halves, so the float4 accesses are 16-byte aligned for aligned tensors). Sizes: 4096
// tokens x 14336, decode 4 x 11008, 999 x 1375 (1373625 values: the last thread of the grid takes a 1-value tail).
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace kernel {

/* kerntune:
args  = ["size: i32 = size", "in1: in f16[size]", "in2: in f16[size]", "out: out f16[size]"]
sizes = [{ size = 58720256 }, { size = 44032 }, { size = 1373625 }]
grid  = "cdiv(size, 2048)"
block = 256
*/
__global__ void __launch_bounds__(256)
swiglu_kernel_cu_fp16_vec(int size, const half* __restrict__ in1,
                          const half* __restrict__ in2, half* __restrict__ out) {
  const int idx = (threadIdx.x + blockDim.x * blockIdx.x) * 8;

  if (idx + 7 < size) {
    // 8 halves (128 bits) per input through one float4
    float4 raw1 = *reinterpret_cast<const float4*>(in1 + idx);
    float4 raw2 = *reinterpret_cast<const float4*>(in2 + idx);

    const half2* h1 = reinterpret_cast<const half2*>(&raw1);
    const half2* h2 = reinterpret_cast<const half2*>(&raw2);

    float4 out_raw;
    half2* h_out = reinterpret_cast<half2*>(&out_raw);

    #pragma unroll
    for (int i = 0; i < 4; i++) {
      float2 f1 = __half22float2(h1[i]);
      float2 f2 = __half22float2(h2[i]);

      float2 r;
      r.x = f1.x * __fdividef(1.0f, 1.0f + __expf(-f1.x)) * f2.x;
      r.y = f1.y * __fdividef(1.0f, 1.0f + __expf(-f1.y)) * f2.y;

      h_out[i] = __float22half2_rn(r);
    }

    *reinterpret_cast<float4*>(out + idx) = out_raw;
  } else {
    // tail: fewer than 8 values left
    for (int i = idx; i < size && i < idx + 8; i++) {
      float val1 = __half2float(in1[i]);
      float val2 = __half2float(in2[i]);
      out[i] = __float2half(val1 * __fdividef(1.0f, 1.0f + __expf(-val1)) * val2);
    }
  }
}

// The fp16 branch of swiglu_kernel_cu with raw device pointers in place of tensor::Tensor: input1 (gate) and
// input2 (up) of size elements each, output of the same size; stream is a cudaStream_t or null.
void swiglu_kernel_cu_fp16(const half* input1, const half* input2, half* output, int size, void* stream) {
  constexpr int threads = 256;
  constexpr int elems_per_thread = 8;
  const int blocks = (size + threads * elems_per_thread - 1) / (threads * elems_per_thread);

  if (!stream) {
    swiglu_kernel_cu_fp16_vec<<<blocks, threads>>>(size, input1, input2, output);
  } else {
    cudaStream_t stream_ = static_cast<cudaStream_t>(stream);
    swiglu_kernel_cu_fp16_vec<<<blocks, threads, 0, stream_>>>(size, input1, input2, output);
  }
}

}  // namespace kernel
