// SwiGLU forward as Karpathy's llm.c writes it (llmc/swiglu.cuh on the llama3 branch): the two MLP input
// projections c_fc (up) and c_fc2 (gate) are one GEMM with concatenated weights, so the activation receives
// inp (B, T, 2C) holding [x1 | x2] in each C-fiber, x1 the up projection FIRST and x2 the gate SECOND, and writes
// out (B, T, C):
//   out[b, t, c] = floatX((x1 * x2) / (1 + expf(-x2)))      i.e. x1 * silu(x2), fp32 math, one rounding
// llm.c conventions: floatX is the storage type of the build (bf16 here), Packed128 x128 = 16 bytes = 8 floatX
// loaded with the streaming hint (load128cs -> __ldcs) and stored with store128; one x128 per thread over a flat
// output index idx = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size, b / t / c recovered by division,
// int indexing, block_size = 128 in the launcher, grid CEIL_DIV(B * T * C, block_size * x128::size).
// C must be a multiple of x128::size (8) so that a pack never crosses a row; the flat tail (B * T * C not a
// multiple of 1024) is cut by the same early-return guard llm.c's encoder kernel has.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cassert>
#include <cstring>

typedef __nv_bfloat16 floatX;

#define CEIL_DIV(M, N) (((M) + (N)-1) / (N))

// ----------------------------------------------------------------------------
// Packed128: forces 128-bit loads and stores of any element type

template <class ElementType>
struct alignas(16) Packed128 {
  Packed128() = default;
  __device__ explicit Packed128(int4 bits) { memcpy(&payload, &bits, sizeof(bits)); }
  __device__ ElementType& operator[](int index) { return payload[index]; }
  __device__ const ElementType& operator[](int index) const { return payload[index]; }
  __device__ int4 get_bits() const {
    int4 bits;
    memcpy(&bits, &payload, sizeof(bits));
    return bits;
  }
  static constexpr const size_t size = sizeof(int4) / sizeof(ElementType);
  ElementType payload[size];
};

typedef Packed128<floatX> x128;

// load with the streaming (evict-first) cache hint: the input is read exactly once
template <class ElementType>
__device__ Packed128<ElementType> load128cs(const ElementType* address) {
  return Packed128<ElementType>{__ldcs(reinterpret_cast<const int4*>(address))};
}
template <class ElementType>
__device__ void store128(ElementType* target, Packed128<ElementType> value) {
  *reinterpret_cast<int4*>(target) = value.get_bits();
}

// ----------------------------------------------------------------------------
// CUDA kernels

/* kerntune:
args  = ["out: out bf16[B * T * C]", "inp: in bf16[B * T * 2 * C]", "B: i32 = B", "T: i32 = T", "C: i32 = C"]
sizes = [{ B = 4, T = 1024, C = 14336 }, { B = 8, T = 1, C = 14336 }, { B = 3, T = 37, C = 1368 }]
grid  = "cdiv(B * T * C, 128 * 8)"
block = 128
*/
__global__ void swiglu_forward_kernel1(floatX* out, const floatX* inp, int B, int T, int C) {
  int idx = (blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
  if (idx >= B * T * C) { return; }
  floatX* out_ptr = out + idx;
  // b, t, c in the output
  int b = idx / (T * C);
  int t = (idx / C) % T;
  int c = idx % C;

  int C2 = C * 2;
  const floatX* up_ptr = inp + (b * T * C2 + t * C2 + c);  // x1: c_fc, first half
  const floatX* gate_ptr = up_ptr + C;                      // x2: c_fc2, second half, goes through silu

  x128 packed_out;
  x128 packed_up = load128cs(up_ptr);
  x128 packed_gate = load128cs(gate_ptr);
  for (int k = 0; k < x128::size; ++k) {
    float x1 = (float)packed_up[k];
    float x2 = (float)packed_gate[k];
    packed_out[k] = (floatX)((x1 * x2) / (1.0f + expf(-x2)));
  }
  store128(out_ptr, packed_out);
}

// ----------------------------------------------------------------------------
// kernel launcher

// out (B, T, C), inp (B, T, 2C) = [fc | fc2] per position; device pointers, 16-byte aligned, C % 8 == 0.
void swiglu_forward(floatX* out, const floatX* inp, int B, int T, int C, cudaStream_t stream) {
  const int block_size = 128;
  assert(C % x128::size == 0);
  const int grid_size = CEIL_DIV(B * T * C, block_size * x128::size);
  swiglu_forward_kernel1<<<grid_size, block_size, 0, stream>>>(out, inp, B, T, C);
}
