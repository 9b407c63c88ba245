// RMSNorm forward as DP Technology's Uni-Core writes it (csrc/rmsnorm/rmsnorm.cu, rmsnorm_forward behind
// cuda_rms_norm / unicore.modules.RMSNorm; the fused norm of Uni-Mol / Uni-Fold training and inference), bf16:
//   one WARP per row, BatchesPerBlock = 4 rows per block of (32, 4) threads, row = blockIdx.x * 4 + threadIdx.y
//   the row length is a compile-time constant: LNParameters<Dim, VecSize, BatchesPerBlock, WarpsForOneBatchPerBlock>
//   gives Iterations = Dim / (32 * VecSize) vectors per lane, and the whole row and gamma are held in registers
//   (VecType<bf16, 2> = __nv_bfloat162, lane-strided: lane l owns the pairs l, l + 32, ...)
//   sum of squares in acc_t = float, butterfly over the warp through the SHFL_XOR helper
//   rsigma = rsqrtf(var / Dim + epsilon);  y = bf16(float(x) * rsigma * float(gamma))  (one rounding)
//   invvar[row] = rsigma written by lane 0 (kept for the backward pass)
// Uni-Core's conventions: template <IndexType, input_t, output_t, acc_t, Parameters> with IndexType = size_t, the
// row guard wrapping the body, a LAUNCH_FORWARD_KERNEL(len, vec, batches, type) macro ending in `break` inside a
// switch over the supported row lengths (64 ... 5120; any other length silently launches nothing), DIV_CELL for
// the grid, epsilon passed as a double into a float parameter. at::Tensor arguments are replaced by device pointers
// and the dtype dispatch by a bf16 launcher. The spec tunes the 2560-column instance (Uni-Mol2 / Phi-2 width).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstddef>
#include <cstdint>

#define DIV_CELL(a, b) (((a) + (b) - 1) / (b))

template <typename T>
__device__ __forceinline__ T SHFL_XOR(T value, int laneMask, int width, unsigned int mask = 0xffffffff) {
#if CUDA_VERSION >= 9000
  return __shfl_xor_sync(mask, value, laneMask, width);
#else
  return __shfl_xor(value, laneMask, width);
#endif
}

// element type and lanes -> the register type moved in one access
template <typename T, int N>
struct VecTypeImpl;
template <> struct VecTypeImpl<float, 1> { using type = float; };
template <> struct VecTypeImpl<float, 2> { using type = float2; };
template <> struct VecTypeImpl<float, 4> { using type = float4; };
template <> struct VecTypeImpl<half, 1> { using type = half; };
template <> struct VecTypeImpl<half, 2> { using type = half2; };
template <> struct VecTypeImpl<half, 4> { using type = uint64_t; };
template <> struct VecTypeImpl<__nv_bfloat16, 1> { using type = __nv_bfloat16; };
template <> struct VecTypeImpl<__nv_bfloat16, 2> { using type = __nv_bfloat162; };
template <> struct VecTypeImpl<__nv_bfloat16, 4> { using type = uint64_t; };

template <typename T, int N>
using VecType = typename VecTypeImpl<T, N>::type;

template <int Dim_, int VecSize_, int BatchesPerBlock_, int WarpsForOneBatchPerBlock_>
struct LNParameters {
  static constexpr int Dim = Dim_;
  static constexpr int VecSize = VecSize_;
  static constexpr int WarpSize = 32;
  static constexpr int BatchesPerBlock = BatchesPerBlock_;
  static constexpr int WarpStride = WarpSize * VecSize;
  static constexpr int WarpsForOneBatchPerBlock = WarpsForOneBatchPerBlock_;
  static constexpr int Iterations = Dim / WarpStride / WarpsForOneBatchPerBlock;
  static constexpr int BatchStride = Dim / WarpsForOneBatchPerBlock;
  static constexpr int ThreadsPerBlock = BatchesPerBlock * WarpSize * WarpsForOneBatchPerBlock;
  static_assert(Dim == WarpsForOneBatchPerBlock * WarpStride * Iterations, "Dim must be a multiple of the warp stride");
  static_assert(Dim == BatchStride * WarpsForOneBatchPerBlock, "");
};

/* kerntune:
args  = ["dst: out bf16[n1 * n2]", "src: in bf16[n1 * n2]", "gamma: in bf16[n2]", "invvar: out f32[n1]",
         "bsz: u64 = n1", "epsilon: f32 = 1e-5"]
sizes = [{ n1 = 16384, n2 = 2560 }, { n1 = 8, n2 = 2560 }, { n1 = 1001, n2 = 2560 }]
grid  = "cdiv(n1, 4)"
block = [32, 4]
template_args = ["size_t", "__nv_bfloat16", "__nv_bfloat16", "float", "LNParameters<2560, 2, 4, 1>"]
*/
template <typename IndexType, typename input_t, typename output_t, typename acc_t, typename Parameters>
__global__ void rmsnorm_forward(output_t* dst, const input_t* src, const input_t* gamma, acc_t* invvar,
                                IndexType bsz, acc_t epsilon) {
  static_assert(Parameters::WarpsForOneBatchPerBlock == 1, "one warp normalizes one row");
  IndexType batch = blockIdx.x * Parameters::BatchesPerBlock + threadIdx.y;
  if (batch < bsz) {
    src += batch * Parameters::Dim + threadIdx.x * Parameters::VecSize;
    dst += batch * Parameters::Dim + threadIdx.x * Parameters::VecSize;
    gamma += threadIdx.x * Parameters::VecSize;
    using VecInType = VecType<input_t, Parameters::VecSize>;

    VecInType elements[Parameters::Iterations];
    VecInType gamma_reg[Parameters::Iterations];
#pragma unroll
    for (int it = 0; it < Parameters::Iterations; ++it) {
      elements[it] = *(const VecInType*)(src + it * Parameters::WarpStride);
      gamma_reg[it] = *(const VecInType*)(gamma + it * Parameters::WarpStride);
    }
    input_t* x_l = (input_t*)elements;
    input_t* g_l = (input_t*)gamma_reg;

    acc_t sum_sq = 0.0;
#pragma unroll
    for (int k = 0; k < Parameters::Iterations * Parameters::VecSize; ++k) {
      acc_t v = (acc_t)x_l[k];
      sum_sq += v * v;
    }
#pragma unroll
    for (int offset = Parameters::WarpSize / 2; offset > 0; offset /= 2) {
      sum_sq += SHFL_XOR(sum_sq, offset, Parameters::WarpSize);
    }
    const acc_t rsigma = rsqrtf(sum_sq / Parameters::Dim + epsilon);

#pragma unroll
    for (int k = 0; k < Parameters::Iterations * Parameters::VecSize; ++k) {
      x_l[k] = (input_t)(((acc_t)x_l[k]) * rsigma * (acc_t)g_l[k]);
    }
#pragma unroll
    for (int it = 0; it < Parameters::Iterations; ++it) {
      *(VecInType*)(dst + it * Parameters::WarpStride) = elements[it];
    }
    if (threadIdx.x == 0) {
      invvar[batch] = rsigma;
    }
  }
}

#define LAUNCH_FORWARD_KERNEL(len, vec, batches, type)                                                   \
  {                                                                                                      \
    dim3 threads(32, batches);                                                                           \
    int blocks = DIV_CELL(n1, batches);                                                                  \
    rmsnorm_forward<size_t, type, type, float, LNParameters<len, vec, batches, 1>>                       \
        <<<blocks, threads, 0, stream>>>(output, input, gamma, invvar, n1, epsilon);                     \
    break;                                                                                               \
  }

// output, input: [n1, n2] bf16; gamma: [n2] bf16; invvar: [n1] float; device pointers. n2 must be one of the
// lengths below (the Python side checks it before calling).
void cuda_rms_norm_bf16(__nv_bfloat16* output, float* invvar, const __nv_bfloat16* input, int n1, int n2,
                        const __nv_bfloat16* gamma, double epsilon, cudaStream_t stream) {
  switch (n2) {
    case 64: LAUNCH_FORWARD_KERNEL(64, 2, 4, __nv_bfloat16)
    case 128: LAUNCH_FORWARD_KERNEL(128, 2, 4, __nv_bfloat16)
    case 192: LAUNCH_FORWARD_KERNEL(192, 2, 4, __nv_bfloat16)
    case 256: LAUNCH_FORWARD_KERNEL(256, 2, 4, __nv_bfloat16)
    case 320: LAUNCH_FORWARD_KERNEL(320, 2, 4, __nv_bfloat16)
    case 384: LAUNCH_FORWARD_KERNEL(384, 2, 4, __nv_bfloat16)
    case 512: LAUNCH_FORWARD_KERNEL(512, 2, 4, __nv_bfloat16)
    case 640: LAUNCH_FORWARD_KERNEL(640, 2, 4, __nv_bfloat16)
    case 768: LAUNCH_FORWARD_KERNEL(768, 2, 4, __nv_bfloat16)
    case 1024: LAUNCH_FORWARD_KERNEL(1024, 2, 4, __nv_bfloat16)
    case 1280: LAUNCH_FORWARD_KERNEL(1280, 2, 4, __nv_bfloat16)
    case 1536: LAUNCH_FORWARD_KERNEL(1536, 2, 4, __nv_bfloat16)
    case 1792: LAUNCH_FORWARD_KERNEL(1792, 2, 4, __nv_bfloat16)
    case 2048: LAUNCH_FORWARD_KERNEL(2048, 2, 4, __nv_bfloat16)
    case 2560: LAUNCH_FORWARD_KERNEL(2560, 2, 4, __nv_bfloat16)
    case 5120: LAUNCH_FORWARD_KERNEL(5120, 2, 4, __nv_bfloat16)
  }
}
