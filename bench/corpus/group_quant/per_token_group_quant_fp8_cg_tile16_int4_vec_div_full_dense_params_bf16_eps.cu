// Per-token-group fp8 quantization as Meituan LongCat's EPS writes it (meituan-longcat/eps, the expert-parallel MoE
// serving engine; src/quant/fp8.cu, per_token_group_quant_fp8_kernel on PerTokenGroupQuantFP8DenseParams, behind
// per_token_group_quant_fp8<T, Params>), bf16 -> e4m3, groups of GROUP_SIZE = 128 along each token row:
//   one thread group of 128 / ItemsPerVec = 16 threads per group, formed by cooperative_groups::tiled_partition<16>,
//   each thread loading ONE VectorizedType<T> (an __align__(16) struct around an int4: 8 bf16) and taking its absmax
//   in float; the 16 partial maxima merged by tile.shfl_xor
//   scale = absmax / 448 computed by inline PTX div.full.f32 ("to match the Triton kernel bit for bit")
//   reverse_scale = 1 / scale;  q = e4m3(clamp(x * reverse_scale, -448, 448));  8 results stored as one uint64
//   scales ROW-MAJOR [num_tokens, cols / 128] written by the tile's rank 0; no floor on the absmax
//   tokens strided by gridDim.x (grid = num_tokens from Params::num_thread_blocks()), groups strided by the number
//   of thread groups in the block; block = min(cols / 128 * 16, 256)
//   the same kernel dequantizes when p.dequant is set (kept; the spec quantizes)
// EPS passes the Params struct by value; kerntune's spec has no form for a struct argument, so its fields are
// unpacked into kernel arguments in the struct's order and the struct rebuilt in the kernel. FP8_TYPE is
// __nv_fp8_e4m3. cols must be a multiple of 128 (the launcher checks it).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cooperative_groups.h>
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace cg = cooperative_groups;

namespace eps {

using FP8_TYPE = __nv_fp8_e4m3;
constexpr static float FP8_E4M3_MAX = 448.0f;

template <typename T> struct PackedType;
template <> struct PackedType<float> { using type = float; };
template <> struct PackedType<half> { using type = half2; };
template <> struct PackedType<__nv_bfloat16> { using type = __nv_bfloat162; };

// 16 bytes of T moved as one int4
template <typename T>
struct __align__(16) VectorizedType {
  static_assert(sizeof(int4) % sizeof(T) == 0);
  constexpr static int ItemsPerVec = sizeof(int4) / sizeof(T);
  constexpr static int PackPerVec = sizeof(int4) / sizeof(typename PackedType<T>::type);

  int4 data{};

  inline __device__ float absmax() {
    const T* elems = reinterpret_cast<const T*>(&data);
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < ItemsPerVec; i++) {
      m = fmaxf(m, fabsf(static_cast<float>(elems[i])));  // EPS: std::max (built with relaxed constexpr)
    }
    return m;
  }
};

template <int N>
struct float8xn_t;
template <>
struct float8xn_t<8> {
  uint64_t data;
};

template <typename T>
struct PerTokenGroupQuantFP8DenseParams {
  FP8_TYPE* quanted;
  T* origin;
  float* scales;
  int64_t cols;
  int group_size;
  int64_t num_tokens;
  bool dequant{};

  int num_thread_blocks() { return num_tokens; }
};

template <typename T, int GROUP_SIZE>
__device__ void per_token_group_quant_fp8_impl(const T* input, int64_t cols, int64_t num_tokens, float* scales,
                                               FP8_TYPE* output) {
  constexpr static int thread_group_size = GROUP_SIZE / VectorizedType<T>::ItemsPerVec;
  auto tile = cg::tiled_partition<thread_group_size>(cg::this_thread_block());
  int num_thread_groups = blockDim.x / thread_group_size;
  int thread_group_idx = threadIdx.x / thread_group_size;
  using ResultType = float8xn_t<VectorizedType<T>::ItemsPerVec>;

  for (int64_t i = blockIdx.x; i < num_tokens; i += gridDim.x) {
    for (int j = thread_group_idx; j < cols / GROUP_SIZE; j += num_thread_groups) {
      VectorizedType<T> v =
          *(reinterpret_cast<const VectorizedType<T>*>(input + i * cols + j * GROUP_SIZE) + tile.thread_rank());
      float absmax = v.absmax();
      for (int mask = tile.size() / 2; mask > 0; mask /= 2) {
        absmax = max(absmax, tile.shfl_xor(absmax, mask));
      }

      // div.full rather than the div.rn the compiler would emit, to agree with the Triton kernel's numbers
      float scale;
      asm("div.full.f32 %0, %1, %2;" : "=f"(scale) : "f"(absmax), "f"(FP8_E4M3_MAX));
      if (tile.thread_rank() == 0) {
        scales[i * cols / GROUP_SIZE + j] = scale;
      }

      float reverse_scale = 1 / scale;
      ResultType packed{};
#pragma unroll
      for (int k = 0; k < VectorizedType<T>::ItemsPerVec; k++) {
        float x = static_cast<float>(reinterpret_cast<const T*>(&v.data)[k]) * reverse_scale;
        float r = fmax(-FP8_E4M3_MAX, fmin(x, FP8_E4M3_MAX));
        reinterpret_cast<FP8_TYPE*>(&packed.data)[k] = static_cast<FP8_TYPE>(r);
      }
      *(reinterpret_cast<ResultType*>(output + i * cols + j * GROUP_SIZE) + tile.thread_rank()) = packed;
    }
  }
}

template <typename T, int GROUP_SIZE>
__device__ void per_token_group_dequant_fp8_impl(T* output, int64_t cols, int64_t num_tokens, const float* scales,
                                                 const FP8_TYPE* input) {
  constexpr static int thread_group_size = GROUP_SIZE / VectorizedType<T>::ItemsPerVec;
  auto tile = cg::tiled_partition<thread_group_size>(cg::this_thread_block());
  int num_thread_groups = blockDim.x / thread_group_size;
  int thread_group_idx = threadIdx.x / thread_group_size;
  using InputType = float8xn_t<VectorizedType<T>::ItemsPerVec>;

  for (int64_t i = blockIdx.x; i < num_tokens; i += gridDim.x) {
    for (int j = thread_group_idx; j < cols / GROUP_SIZE; j += num_thread_groups) {
      float scale = scales[i * cols / GROUP_SIZE + j];
      InputType q = *(reinterpret_cast<const InputType*>(input + i * cols + j * GROUP_SIZE) + tile.thread_rank());
      VectorizedType<T> result{};
#pragma unroll
      for (int k = 0; k < VectorizedType<T>::ItemsPerVec; k++) {
        float x = static_cast<float>(reinterpret_cast<const FP8_TYPE*>(&q.data)[k]) * scale;
        reinterpret_cast<T*>(&result.data)[k] = static_cast<T>(x);
      }
      *(reinterpret_cast<VectorizedType<T>*>(output + i * cols + j * GROUP_SIZE) + tile.thread_rank()) = result;
    }
  }
}

// GROUP_SIZE % 32 == 0, cols % GROUP_SIZE == 0
/* kerntune:
args  = ["quanted: out u8[num_tokens * cols]", "origin: in bf16[num_tokens * cols]",
         "scales: out f32[num_tokens * cols / 128]", "cols: i64 = cols", "group_size: i32 = 128",
         "num_tokens: i64 = num_tokens", "dequant: u8 = 0"]
sizes = [{ num_tokens = 4096, cols = 7168 }, { num_tokens = 4, cols = 7168 }, { num_tokens = 1001, cols = 2176 }]
grid  = "num_tokens"
block = "min(cols / 128 * 16, 256)"
template_args = ["__nv_bfloat16", "128"]
*/
template <typename T, int GROUP_SIZE>
__global__ void per_token_group_quant_fp8_kernel(FP8_TYPE* quanted, T* origin, float* scales, int64_t cols,
                                                 int group_size, int64_t num_tokens, bool dequant) {
  PerTokenGroupQuantFP8DenseParams<T> p{quanted, origin, scales, cols, group_size, num_tokens, dequant};
  if (p.dequant) {
    per_token_group_dequant_fp8_impl<T, GROUP_SIZE>(p.origin, p.cols, p.num_tokens, p.scales, p.quanted);
  } else {
    per_token_group_quant_fp8_impl<T, GROUP_SIZE>(p.origin, p.cols, p.num_tokens, p.scales, p.quanted);
  }
}

// params.origin: [num_tokens, cols] T; params.quanted: [num_tokens, cols] e4m3; params.scales: [num_tokens,
// cols / 128] float, row-major; device pointers.
template <typename T>
void per_token_group_quant_fp8(PerTokenGroupQuantFP8DenseParams<T> params, cudaStream_t stream) {
  if (params.group_size % 32 != 0) {
    throw std::runtime_error("group_size: " + std::to_string(params.group_size) + " is not divisible by 32.");
  }
  if (params.cols % params.group_size != 0) {
    throw std::runtime_error("cols: " + std::to_string(params.cols) +
                             " is not divisible by group_size: " + std::to_string(params.group_size));
  }
  if (params.group_size == 128) {
    constexpr static int thread_group_size = 128 / VectorizedType<T>::ItemsPerVec;
    int block_size = std::min<int>(params.cols / params.group_size * thread_group_size, 256);
    per_token_group_quant_fp8_kernel<T, 128><<<params.num_thread_blocks(), block_size, 0, stream>>>(
        params.quanted, params.origin, params.scales, params.cols, params.group_size, params.num_tokens,
        params.dequant);
  } else {
    throw std::runtime_error("Not supported group size: " + std::to_string(params.group_size));
  }
}

template void per_token_group_quant_fp8<half>(PerTokenGroupQuantFP8DenseParams<half> params, cudaStream_t stream);
template void per_token_group_quant_fp8<__nv_bfloat16>(PerTokenGroupQuantFP8DenseParams<__nv_bfloat16> params,
                                                       cudaStream_t stream);

}  // namespace eps
