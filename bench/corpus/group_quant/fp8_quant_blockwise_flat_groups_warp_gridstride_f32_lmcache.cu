// Block-wise fp8 quantization of KV-cache data as LMCache writes it for its KV offload serde (csrc/cuda/
// fp8_quantize.cu, fp8QuantBlockwiseKernel behind fp8QuantizeScaled, scale_mode 2): the fp32 KV tensor is taken as
// ONE FLAT ARRAY and cut into groups of `blk` (128) consecutive values, whatever the tensor's shape,
//   m = max |x| over the group (raised to amax_ceiling when that is > 0)
//   sc = m > 2^-6 ? m / 448 : 1.0          (the smallest e4m3 normal guards all-zero groups; scales[g] = sc)
//   q = e4m3(x * (1 / sc)), satfinite      (__nv_cvt_float_to_fp8 with __NV_SATFINITE, __NV_E4M3)
// the DEQUANT multiplier stored, multiplied back by the reader. LMCache's conventions: fp32 input only (bf16 callers
// cast first), raw __nv_fp8_storage_t output, argument order (x, q, scales, n_groups, blk, amax_ceiling) with int
// counts, ONE WARP PER GROUP: 256 threads (8 warps) a block, blocks = ceil(n_groups / 8), each warp striding over
// groups by warps * gridDim.x (a grid-stride loop that runs once at this launch), lanes striding the group by 32
// twice (max, then quantize), an xor-butterfly warpReduceMax so every lane holds the group max, lane 0 writing the
// scale; constants in an anonymous namespace, namespace lmcache.
#include <cuda_runtime.h>
#include <cuda_fp8.h>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace lmcache {

namespace {

// float8_e4m3fn: finite-only, 4-bit exponent, 3-bit mantissa.
constexpr float kFp8Max = 448.0f;
// Smallest e4m3 normal, 2^-6. Guards the division for all-zero groups.
constexpr float kFp8MinNormal = 0.015625f;

// Butterfly reduction: every lane ends with the warp-wide max.
__device__ __forceinline__ float warpReduceMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

}  // namespace

/* kerntune:
args  = ["x: in f32[tokens * hidden]", "q: out u8[tokens * hidden]", "scales: out f32[tokens * hidden / 128]",
         "n_groups: i32 = tokens * hidden / 128", "blk: i32 = 128", "amax_ceiling: f32 = 0.0"]
sizes = [{ tokens = 8192, hidden = 4096 }, { tokens = 4, hidden = 1024 }, { tokens = 1001, hidden = 896 }]
grid  = "cdiv(tokens * hidden / 128, 8)"
block = 256
*/
// One warp per group of `blk` elements. Block b owns groups [b * warps, b * warps + warps); each warp strides by
// warps * gridDim.x.
__global__ void fp8QuantBlockwiseKernel(const float* __restrict__ x, __nv_fp8_storage_t* __restrict__ q,
                                        float* __restrict__ scales, int n_groups, int blk, float amax_ceiling) {
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warps = blockDim.x >> 5;
  const int gstride = warps * gridDim.x;

  for (int g = blockIdx.x * warps + warp; g < n_groups; g += gstride) {
    const int base = g * blk;
    const float* xp = x + (size_t)base;
    __nv_fp8_storage_t* qp = q + (size_t)base;

    float m = 0.0f;
    for (int i = lane; i < blk; i += 32) m = fmaxf(m, fabsf(xp[i]));
    m = warpReduceMax(m);
    if (amax_ceiling > 0.0f) m = fmaxf(m, amax_ceiling);

    // scales[] holds the dequant multiplier; inv is its reciprocal.
    const float sc = (m > kFp8MinNormal) ? (m / kFp8Max) : 1.0f;
    if (lane == 0) scales[g] = sc;
    const float inv = (sc > 0.0f) ? (1.0f / sc) : 1.0f;

    for (int i = lane; i < blk; i += 32) {
      qp[i] = __nv_cvt_float_to_fp8(xp[i] * inv, __NV_SATFINITE, __NV_E4M3);
    }
  }
}

// x: n contiguous fp32 values; fp8_out: n bytes; scales: n / block_size floats; device pointers. The block-wise
// mode of fp8QuantizeScaled (per-tensor and row-wise modes are other kernels of the file).
void fp8QuantizeBlockwise(const float* x, void* fp8_out, float* scales, int64_t n, int64_t block_size,
                          double amax_ceiling, cudaStream_t stream) {
  if (!(block_size > 0 && block_size % 32 == 0)) {
    throw std::invalid_argument("block_size must be a positive multiple of 32");
  }
  const int64_t n_groups = n / block_size;
  if (n_groups <= 0) throw std::invalid_argument("tensor smaller than one block");
  const int threads = 256;  // 8 warps per block
  const int64_t blocks = (n_groups + 7) / 8;
  fp8QuantBlockwiseKernel<<<blocks, threads, 0, stream>>>(x, reinterpret_cast<__nv_fp8_storage_t*>(fp8_out), scales,
                                                          static_cast<int>(n_groups), static_cast<int>(block_size),
                                                          static_cast<float>(amax_ceiling));
}

}  // namespace lmcache
