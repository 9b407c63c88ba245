// SwiGLU as operators-rs writes it (YdrMaster/operators-rs, operators/src/swiglu/cuda/swiglu.cuh swiglu, wrapped by
// the extern "C" swiglu_f16 that operators/src/swiglu/cuda/mod.rs generates, compiles at run time and launches from
// Operator::launch; operators-rs is the Rust operator library of the InfiniLM Rust inference engine, one operator
// per directory with CPU, CUDA, OpenCL, Ascend and Cambricon back ends), fp16, IN PLACE on the gate:
//   gate [n, d] and up [n, d] are two 2-D tensor layouts (the two halves of the fused gate_up projection
//   [n, 2 * di], split along the columns, so each has a row stride of 2 * di elements); the result
//   silu(gate) * up overwrites gate, which the down projection then reads.
//     gate = half(x * sigmoid(x) * y),  sigmoid(x) = fdividef(1, 1 + expf(-x)),  x = gate, y = up   (fp32 math)
//   The layouts carry strides in BYTES: the launcher checks that the column strides are the element size (else
//   strides_not_support) and passes the row strides divided by the element size as int; fp16 only (else
//   type_not_support).
//   Launch: a 2-D grid with the ROWS on y: grid (d / block, n), block = gcd(max_threads_block, d) with
//   max_threads_block = 1024 (the device's block limit), so the block divides the row exactly and the kernel has
//   NO bounds check; one element per thread, column blockIdx.x * blockDim.x + threadIdx.x. A row length with few
//   factors of two gets small blocks (d = 11008 -> 256 threads, d = 3001 -> 1 thread per block).
// Fixed: the element offset blockIdx.y * stride + column was computed in 32-bit unsigned arithmetic (auto from
// blockIdx), wrapping past 2^32 elements (a gate_up activation of 2 x 29568 columns beyond 72k tokens); the row
// offset is 64-bit here.
// Changed: the kernel text (compiled by NVRTC per device) is an ordinary __global__ in this file; the device's block
// limit is the constant 1024; the Rust launch (grid dims given (y, x) as (n, d / block)) became a C++ launcher over
// byte strides and a stream.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstddef>
#include <cstdint>

namespace operators {
namespace swiglu {

enum class LaunchError { Ok, TypeNotSupport, StridesNotSupport };

static __forceinline__ __device__ float sigmoid(float x) { return fdividef(1, 1 + expf(-x)); }

template <class Tdata>
static __device__ void swiglu(Tdata* __restrict__ gate_, int const stride_gate, Tdata const* __restrict__ up_,
                              int const stride_up) {
  auto k = blockIdx.x * blockDim.x + threadIdx.x;
  auto i = static_cast<int64_t>(blockIdx.y) * stride_gate + k;
  auto j = static_cast<int64_t>(blockIdx.y) * stride_up + k;
  auto x = float(gate_[i]), y = float(up_[j]);
  gate_[i] = Tdata(x * sigmoid(x) * y);
}

}  // namespace swiglu
}  // namespace operators

/* kerntune:
args  = ["gate: inout f16[n * 2 * d]", "stride_gate: i32 = 2 * d", "up: in f16[n * 2 * d]",
         "stride_up: i32 = 2 * d"]
sizes = [{ n = 8192, d = 11008 }, { n = 4, d = 14336 }, { n = 999, d = 3001 }]
grid  = ["d / (1024 if d % 1024 == 0 else 512 if d % 512 == 0 else 256 if d % 256 == 0 else 128 if d % 128 == 0 else 64 if d % 64 == 0 else 32 if d % 32 == 0 else 16 if d % 16 == 0 else 8 if d % 8 == 0 else 4 if d % 4 == 0 else 2 if d % 2 == 0 else 1)", "n"]
block = "1024 if d % 1024 == 0 else 512 if d % 512 == 0 else 256 if d % 256 == 0 else 128 if d % 128 == 0 else 64 if d % 64 == 0 else 32 if d % 32 == 0 else 16 if d % 16 == 0 else 8 if d % 8 == 0 else 4 if d % 4 == 0 else 2 if d % 2 == 0 else 1"
bytes = "6 * n * d"
*/
extern "C" __global__ void swiglu_f16(half* __restrict__ gate, int const stride_gate, half const* __restrict__ up,
                                      int const stride_up) {
  operators::swiglu::swiglu(gate, stride_gate, up, stride_up);
}

namespace operators {
namespace swiglu {

// utils::gcd
static size_t gcd(size_t a, size_t b) {
  while (b != 0) {
    const size_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

// Operator::launch for fp16: gate, up [n, d] with row and column strides in bytes (the column stride must be the
// element size). Device pointers.
LaunchError launch(void* gate_base, ptrdiff_t gns, ptrdiff_t gds, const void* up_base, ptrdiff_t uns, ptrdiff_t uds,
                   size_t n, size_t d, size_t dt_nbytes, cudaStream_t queue) {
  constexpr size_t max_threads_block = 1024;  // device.block_limit().max_threads
  if (dt_nbytes != sizeof(half)) return LaunchError::TypeNotSupport;

  const ptrdiff_t unit = static_cast<ptrdiff_t>(dt_nbytes);
  if (gds != unit || uds != unit) return LaunchError::StridesNotSupport;

  const int sg = static_cast<int>(gns / unit);
  const int su = static_cast<int>(uns / unit);
  const size_t block = gcd(max_threads_block, d);

  // ((n, d / block), block, 0): the grid is given (y, x)
  const dim3 grid(static_cast<unsigned>(d / block), static_cast<unsigned>(n));
  swiglu_f16<<<grid, static_cast<unsigned>(block), 0, queue>>>(static_cast<half*>(gate_base), sg,
                                                               static_cast<const half*>(up_base), su);
  return LaunchError::Ok;
}

}  // namespace swiglu
}  // namespace operators
