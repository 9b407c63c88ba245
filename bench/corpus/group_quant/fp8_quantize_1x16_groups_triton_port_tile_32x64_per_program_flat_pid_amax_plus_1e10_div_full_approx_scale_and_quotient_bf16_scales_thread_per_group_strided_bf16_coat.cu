// Per-group FP8 quantization in the style of NVIDIA COAT (NVlabs/COAT, coat/activation/real_quantization/
// _quantize.py: _fp8_quantize_kernel behind fp8_quantize(x, QB, fp8type, scale_dtype=torch.bfloat16); COAT is the
// "Compressing Optimizer states and Activations for memory-efficient FP8 Training" framework, whose activations are
// stored in FP8 with 1 x 16 per-group scales), written as the CUDA port of that Triton program:
//   input [M, N] bf16 (any 2-D strides; a 3-D activation is flattened to 2-D by the caller) -> output [M, N] fp8 e4m3
//   and output_scale [M, SN] BF16 (COAT's default scale dtype), SN = N / QB, QB = 16: groups of 16 consecutive
//   columns of a row; every tensor addressed through its own (stride_0, stride_1), argument order as COAT's
//   (output, output_scale, input, M, N, SN, QB, fp8_max, input / output / scale strides).
//   One program per BLOCK_M x BLOCK_N tile, the tile index FLAT: grid cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N), pid split
//   into (pid // NUM_BLOCK_N, pid % NUM_BLOCK_N); the tile reshaped to (BLOCK_M, BLOCK_SN, QB) and reduced over QB.
//   Numerics as Triton runs them: amax = max |x| over the group, max_val = amax + SCALE_MIN_THRES (1e-10 ADDED, not
//   a clamp), scale = max_val / fp8_max and x / scale both as fp32 division with Triton's div.full.f32 (tl.fdiv with
//   ieee_rounding False, and '/' on fp32, both lower to it: written here as that PTX instruction), the quotient
//   converted to e4m3 with round-to-nearest and saturation (cvt.rn.satfinite), the fp32 scale rounded to bf16 only
//   when stored (the codes were divided by the unrounded scale).
//   COAT autotunes BLOCK_M in {QB, 2 QB}, BLOCK_N in {QB, 2 QB, 4 QB}, num_warps in {4, 8}; the port fixes one
//   configuration, BLOCK_M = 2 QB = 32, BLOCK_N = 4 QB = 64, 4 warps (template arguments QB, BLOCK_M, BLOCK_N):
//   the 32 x 4 groups of a tile are spread over the 128 threads, a thread per group (row g / BLOCK_SN, group column
//   g % BLOCK_SN), its QB values in registers, loaded and stored element by element through the strides.
// Fixed: COAT's block pointers are loaded and stored WITHOUT boundary_check, so a tile past the last row (M not a
// multiple of BLOCK_M: any token count) or past the last column block (N not a multiple of BLOCK_N) read and wrote
// out of bounds; rows and groups outside [M, N) are skipped here. Changed: the fp8 type (E4M3 / E5M2 choice) and the
// scale dtype are fixed to e4m3 and bf16, the autotuner's choice is fixed as above, the Python wrapper became a C++
// launcher with device pointers, sizes and a stream; N must be a multiple of QB (COAT's SN = N // QB assumes it).
#include <assert.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace coat {

constexpr float SCALE_MIN_THRES = 1e-10f;  // common.py
constexpr float FP8_E4M3_MAX = 448.0f;     // FP8_MAX_VALUE[torch.float8_e4m3fn]
constexpr int kNumWarps = 4;
constexpr int kThreads = kNumWarps * 32;

// fp32 division as Triton emits it (tl.fdiv / '/': div.full.f32, not IEEE-rounded)
__device__ __forceinline__ float fdiv_full(float a, float b) {
  float r;
  asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

/* kerntune:
args  = ["output_ptr: out u8[M * N]", "output_scale_ptr: out bf16[M * (N / 16)]", "input_ptr: in bf16[M * N]",
         "M: i32 = M", "N: i32 = N", "SN: i32 = N / 16", "fp8_max: f32 = 448.0", "input_stride_0: i32 = N",
         "input_stride_1: i32 = 1", "output_stride_0: i32 = N", "output_stride_1: i32 = 1",
         "s_output_stride_0: i32 = N / 16", "s_output_stride_1: i32 = 1"]
sizes = [{ M = 8192, N = 4096 }, { M = 4, N = 14336 }, { M = 999, N = 1040 }]
grid  = "cdiv(M, 32) * cdiv(N, 64)"
block = 128
template_args = ["__nv_bfloat16", "16", "32", "64"]
*/
template <typename T, int QB, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(kThreads)
    _fp8_quantize_kernel(__nv_fp8_e4m3* output_ptr, __nv_bfloat16* output_scale_ptr, const T* input_ptr, int M,
                         int N, int SN, float fp8_max, int input_stride_0, int input_stride_1, int output_stride_0,
                         int output_stride_1, int s_output_stride_0, int s_output_stride_1) {
  constexpr int BLOCK_SN = BLOCK_N / QB;  // heuristics: BLOCK_N // QB
  static_assert(BLOCK_SN * QB == BLOCK_N, "a tile holds whole groups");

  // Block PID
  const int pid = blockIdx.x;
  const int NUM_BLOCK_N = (N + BLOCK_N - 1) / BLOCK_N;
  const int pid_dim0 = pid / NUM_BLOCK_N;
  const int pid_dim1 = pid % NUM_BLOCK_N;

  for (int g = threadIdx.x; g < BLOCK_M * BLOCK_SN; g += kThreads) {
    const int row = pid_dim0 * BLOCK_M + g / BLOCK_SN;
    const int sn = pid_dim1 * BLOCK_SN + g % BLOCK_SN;  // the group's column in the scale tensor
    const int col0 = sn * QB;
    if (row >= M || col0 >= N) continue;  // fixed: the block pointers had no boundary_check

    const T* in = input_ptr + (int64_t)row * input_stride_0 + (int64_t)col0 * input_stride_1;
    float x[QB];
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < QB; ++j) {
      x[j] = static_cast<float>(in[(int64_t)j * input_stride_1]);
      amax = fmaxf(amax, fabsf(x[j]));
    }
    // Quantize Scale calculation
    const float max_val = amax + SCALE_MIN_THRES;
    const float scale_output = fdiv_full(max_val, fp8_max);

    // Quantize
    __nv_fp8_e4m3* out = output_ptr + (int64_t)row * output_stride_0 + (int64_t)col0 * output_stride_1;
#pragma unroll
    for (int j = 0; j < QB; ++j) out[(int64_t)j * output_stride_1] = __nv_fp8_e4m3(fdiv_full(x[j], scale_output));
    output_scale_ptr[(int64_t)row * s_output_stride_0 + (int64_t)sn * s_output_stride_1] =
        __float2bfloat16_rn(scale_output);
  }
}

template <typename T, int QB>
static void launch_fp8_quantize(const T* x, __nv_fp8_e4m3* y, __nv_bfloat16* s_y, int M, int N, cudaStream_t stream) {
  constexpr int BLOCK_M = 2 * QB;  // the autotuner's configuration, fixed
  constexpr int BLOCK_N = 4 * QB;
  const int SN = N / QB;
  // contiguous x, y = empty_like(x, fp8), s_y = empty((M, SN))
  const int grid = ((M + BLOCK_M - 1) / BLOCK_M) * ((N + BLOCK_N - 1) / BLOCK_N);
  _fp8_quantize_kernel<T, QB, BLOCK_M, BLOCK_N><<<grid, kThreads, 0, stream>>>(
      y, s_y, x, M, N, SN, FP8_E4M3_MAX, N, 1, N, 1, SN, 1);
}

}  // namespace coat

// x: device [M, N] (bf16 or fp16, contiguous); y: [M, N] fp8 e4m3; s_y: [M, N / QB] bf16. QB in {16, 32, 64, 128}.
template <typename T>
void fp8_quantize(const T* x, int M, int N, int QB, __nv_fp8_e4m3* y, __nv_bfloat16* s_y, cudaStream_t stream) {
  assert(N % QB == 0);
  if (M == 0 || N == 0) return;
  switch (QB) {
    case 16: coat::launch_fp8_quantize<T, 16>(x, y, s_y, M, N, stream); break;
    case 32: coat::launch_fp8_quantize<T, 32>(x, y, s_y, M, N, stream); break;
    case 64: coat::launch_fp8_quantize<T, 64>(x, y, s_y, M, N, stream); break;
    case 128: coat::launch_fp8_quantize<T, 128>(x, y, s_y, M, N, stream); break;
    default: assert(false);
  }
}

template void fp8_quantize<__nv_bfloat16>(const __nv_bfloat16*, int, int, int, __nv_fp8_e4m3*, __nv_bfloat16*,
                                          cudaStream_t);
