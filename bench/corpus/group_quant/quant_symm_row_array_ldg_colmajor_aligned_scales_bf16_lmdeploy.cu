// Per-token-group fp8 quantization as LMDeploy's TurboMind writes it (src/turbomind/kernels/quantization.cu,
// quant_symm_row behind QuantizeSymm, the activation side of its DeepSeek-style fp8 blockwise GEMMs), bf16 -> e4m3:
//   groups of group_size = 128 along each token row; absmax found IN BF16 (__habs / __hmax) and reduced over the
//   group's 16 threads by xor shuffles of the 32-bit word holding it
//   scale     = absmax / qmax         stored COLUMN-MAJOR: scales[(di / 128) * scales_ld + ti], scales_ld the token
//                                     count rounded up to 16 bytes of floats (round_up(num, 4))
//   inv_scale = qmax / absmax         a second division (no clamp of a zero absmax)
//   out       = fp8_e4m3(float(x) * inv_scale)       (qmax = 448; the e4m3 constructor saturates)
// TurboMind's conventions: template <int vec_size, int group_size, class Tout, class Tscale, class T> with the types
// deduced at the launch, Array<T, vec_size> register vectors moved whole by Ldg (16-byte __ldg) and Store,
// find_absmax<threads>(vec) with threads = group_size / vec_size = 16 lanes per group; one token per block
// (for ti = blockIdx.x; ti < num; ti += gridDim.x) with grid = num, 512 threads each taking 8 values per step
// (for di = threadIdx.x * 8; di < dim; di += 512 * 8); row strides out_ld / src_ld for the activations; Tensor
// arguments replaced by pointers, strides and sizes (dim a multiple of 256 so that whole warps leave the loop together,
// as the shuffles assume). TurboMind unrolls through a PRAGMA_UNROLL macro (_Pragma("unroll")) standing alone before
// each loop; kerntune's parser does not read a macro statement without a `;`, so it is written #pragma unroll here.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

// TurboMind: #define PRAGMA_UNROLL _Pragma("unroll") (see the header comment)

namespace turbomind {

using bfloat16_t = __nv_bfloat16;
using fp8_e4m3_t = __nv_fp8_e4m3;

template <typename T, int N>
struct Array {
  T __a[N];

  __host__ __device__ constexpr T& operator[](int i) noexcept { return __a[i]; }
  __host__ __device__ constexpr const T& operator[](int i) const noexcept { return __a[i]; }
};

template <typename T, int N>
__device__ void Ldg(Array<T, N>& dst, const T* src) {
  static_assert(sizeof(Array<T, N>) == sizeof(uint4));
  (uint4&)dst = __ldg((const uint4*)src);
}

template <typename T, int N>
__device__ void Store(T* dst, const Array<T, N>& src) {
  static_assert(sizeof(Array<T, N>) == sizeof(uint2));  // 8 fp8 values
  *(uint2*)dst = (const uint2&)src;
}

template <class T>
__host__ __device__ constexpr T round_up(T a, T b) {
  return (a + b - 1) / b * b;
}

template <int threads, class T, int N>
__device__ T find_absmax(const Array<T, N>& a) {
  static_assert((threads & (threads - 1)) == 0);
  static_assert(sizeof(Array<T, 2>) == sizeof(uint32_t));
  uint32_t data;
  auto& val = *reinterpret_cast<T*>(&data);
  val = __habs(a[0]);
#pragma unroll
  for (int i = 1; i < N; ++i) {
    val = __hmax(val, __habs(a[i]));
  }
#pragma unroll
  for (int mask = threads / 2; mask > 0; mask /= 2) {
    uint32_t tmp = __shfl_xor_sync(uint32_t(-1), data, mask);
    auto& x = *reinterpret_cast<T*>(&tmp);
    val = __hmax(val, x);
  }
  return val;
}

/* kerntune:
args  = ["out: out u8[num * dim]", "out_ld: i32 = dim", "scales: out f32[dim / 128 * round_up(num, 4)]",
         "scales_ld: i32 = round_up(num, 4)", "src: in bf16[num * dim]", "src_ld: i32 = dim", "num: i32 = num",
         "dim: i32 = dim", "qmax: f32 = 448.0"]
sizes = [{ num = 4096, dim = 7168 }, { num = 4, dim = 7168 }, { num = 1001, dim = 2048 }]
grid  = "num"
block = 512
template_args = ["8", "128", "__nv_fp8_e4m3", "float", "__nv_bfloat16"]
*/
template <int vec_size, int group_size, class Tout, class Tscale, class T>
__global__ void quant_symm_row(Tout* out, int out_ld, Tscale* scales, int scales_ld, const T* src, int src_ld,
                               int num, int dim, Tscale qmax) {
  static_assert(group_size % vec_size == 0);
  constexpr int threads = group_size / vec_size;
  for (int ti = blockIdx.x; ti < num; ti += gridDim.x) {
    for (int di = threadIdx.x * vec_size; di < dim; di += blockDim.x * vec_size) {
      Array<T, vec_size> vec;
      Ldg(vec, src + ti * src_ld + di);
      auto absmax = static_cast<Tscale>(find_absmax<threads>(vec));
      const Tscale scale = absmax / qmax;
      const Tscale inv_scale = qmax / absmax;
      if (threadIdx.x % threads == 0) {
        // column-major
        scales[(di / group_size) * scales_ld + ti] = scale;
      }
      Array<Tout, vec_size> tmp;
#pragma unroll
      for (int c = 0; c < vec_size; ++c) {
        tmp[c] = Tout(static_cast<Tscale>(vec[c]) * inv_scale);
      }
      Store(out + ti * out_ld + di, tmp);
    }
  }
}

// src: [num, dim] bf16 (row stride src_ld); out: [num, dim] fp8 e4m3 (row stride out_ld); scale: [dim / 128,
// round_up(num, 4)] float, column-major per token; device pointers. dim a multiple of 256.
void QuantizeSymm(fp8_e4m3_t* out, int out_ld, float* scale, const bfloat16_t* src, int src_ld, int num, int dim,
                  cudaStream_t st) {
  using Tscale = float;

  constexpr int group_size = 128;
  constexpr int vec_size = 8;

  constexpr int alignment = 16 / sizeof(Tscale);
  const int aligned_num = round_up<int>(num, alignment);

  constexpr int block_dim = 512;

  quant_symm_row<vec_size, group_size><<<num, block_dim, 0, st>>>(out,  //
                                                                  out_ld,
                                                                  scale,
                                                                  aligned_num,
                                                                  src,
                                                                  src_ld,
                                                                  num,
                                                                  dim,
                                                                  448.f);
}

}  // namespace turbomind
