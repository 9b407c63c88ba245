// Gated GELU (GeGLU) as FasterTransformer / TensorRT-LLM's generic activation kernel runs it after the two FFN
// GEMMs of a gated MLP (T5 v1.1 / Flan-T5 / UL2 "gated-gelu"): the first GEMM's output `out` [m, n] is the
// activation input and is overwritten IN PLACE, the second GEMM's output `gated_weights` [m, n] is a separate
// tensor (not a half of the same row), both with optional biases [n]:
//   out = gelu_tanh(out + bias) * (gated_weights + gated_bias)
// The kernel is templated over the activation (a struct with a static apply, GeluActivation<half2>, passed as a type
// template argument; the host launcher takes the activation as a template template parameter) and over the packed
// element type: the host reinterprets the fp16 buffers as half2 and passes n / 2, so every access
// moves one half2 pair (n must be even). Numerics as the half2 path has them: the bias adds are __hadd2 (rounded
// to fp16), x^3 is taken in half2, the tanh argument and 0.5 * (1 + tanh) in fp32 with the tanh.approx
// instruction, 0.5 * (1 + tanh) rounded to fp16 and multiplied by x in half2, and the gate product is __hmul2.
// Launch (the generic activation launcher's rule): when n / 4 / 2 <= 1024 one block per row of n / 8 threads
// (each thread then strides over 4 pairs), otherwise 1024 threads and ceil(m * n / 1024) blocks; in both cases
// the body is one grid-stride loop over the m * n / 2 pairs, so the large shape launches twice the threads it has
// pairs for and half of them find nothing to do.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cmath>
#include <cstdint>

namespace ft {

__device__ __forceinline__ float tanh_opt(float x) {
  float r;
  asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

template <typename T>
struct GeluActivation;

template <>
struct GeluActivation<half2> {
  static __device__ __forceinline__ half2 apply(const half2& val) {
    const half2 val_pow3 = __hmul2(val, __hmul2(val, val));
    const float2 x = __half22float2(val);
    const float2 x3 = __half22float2(val_pow3);
    float2 t;
    t.x = 0.5f * (1.0f + tanh_opt(0.7978845608028654f * (x.x + 0.044715f * x3.x)));
    t.y = 0.5f * (1.0f + tanh_opt(0.7978845608028654f * (x.y + 0.044715f * x3.y)));
    return __hmul2(val, __float22half2_rn(t));
  }
};

/* kerntune:
args  = ["out: inout f16[m * inter]", "bias: in f16[inter]", "gated_weights: in f16[m * inter]",
         "gated_bias: in f16[inter]", "m: i32 = m", "n: i32 = inter / 2"]
sizes = [{ m = 2048, inter = 16384 }, { m = 8, inter = 16384 }, { m = 37, inter = 2998 }]
grid  = "m if inter / 4 / 2 <= 1024 else cdiv(m * inter, 1024)"
block = "inter / 4 / 2 if inter / 4 / 2 <= 1024 else 1024"
template_args = ["GeluActivation<half2>", "half2", "half2"]
*/
template <typename Activation, typename T, typename BT>
__global__ void generic_activation(T* out, const BT* __restrict__ bias, const T* __restrict__ gated_weights,
                                   const BT* __restrict__ gated_bias, int m, int n) {
  const bool with_bias = bias != nullptr;
  const bool with_gate = gated_weights != nullptr;

  for (int64_t id = blockIdx.x * blockDim.x + threadIdx.x; id < 1LL * m * n; id += blockDim.x * gridDim.x) {
    T val = out[id];
    T gated_val;
    if (with_gate) {
      gated_val = gated_weights[id];
    }
    if (with_bias) {
      val = __hadd2(val, bias[id % n]);
      if (with_gate) {
        gated_val = __hadd2(gated_val, gated_bias[id % n]);
      }
    }
    if (with_gate) {
      val = __hmul2(Activation::apply(val), gated_val);
    } else {
      val = Activation::apply(val);
    }
    out[id] = val;
  }
}

// out: [m, n] fp16, the first GEMM's output, overwritten; gated_weights: [m, n] fp16 (or null: plain GELU);
// bias, gated_bias: [n] fp16 (or null). Device pointers, 4-byte aligned; n even.
template <template <typename> class Activation>
void invokeGenericActivation(half* out, const half* bias, const half* gated_weights, const half* gated_bias, int m,
                             int n, cudaStream_t stream) {
  using PT = half2;
  constexpr int packed_elems = 2;
  dim3 block, grid;
  if (n / 4 / packed_elems <= 1024) {
    block.x = n / 4 / packed_elems;
    grid.x = m;
  } else {
    block.x = 1024;
    grid.x = static_cast<unsigned>(ceil(1LL * m * n / 1024.));
  }
  generic_activation<Activation<PT>, PT, PT><<<grid, block, 0, stream>>>(
      reinterpret_cast<PT*>(out), reinterpret_cast<const PT*>(bias), reinterpret_cast<const PT*>(gated_weights),
      reinterpret_cast<const PT*>(gated_bias), m, n / packed_elems);
}

template void invokeGenericActivation<GeluActivation>(half*, const half*, const half*, const half*, int, int,
                                                      cudaStream_t);

}  // namespace ft
