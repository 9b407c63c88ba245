// LayerNorm in the style of MIGraphX (ROCm/AMDMIGraphX, src/targets/gpu/kernels/include/migraphx/kernels/
// layernorm.hpp: layernorm / generic_binary_layernorm on reduce::block from kernels/reduce.hpp, compiled by
// layernorm_compiler in src/targets/gpu/jit/layernorm.cpp for gpu::prelayernorm with its fused pointwise module;
// MIGraphX is AMD's graph compiler and inference engine for ONNX models, which JIT-compiles one HIP kernel per
// shape), ported from HIP to CUDA as the kernel MIGraphX generates for ONNX LayerNormalization with its
// scale and bias, "layernorm_mul_add_kernel":
//   x, output [rows, hidden] fp16, gamma, beta [hidden] fp16 (broadcast inputs of the fused post op); argument order
//   (x, gamma, beta, output, rows, eps) - MIGraphX passes void pointers, inputs first and the output last;
//   THE SHAPE IS COMPILED IN: the row length, the vector width and the block size are template constants
//   (template <T, kHidden, kVec>, the block MIGRAPHX_NLOCAL derived from them), the launcher switching over the
//   supported hidden sizes (2560, 4096, 5120) and widths; the vector width is chosen per call by
//   vectorize::elements from the problem size: 8 halves (16 bytes) when the tensor is more than 8x the device's
//   thread capacity (132 SMs x 2048 threads, gamma/beta broadcast), 4 when more than 4x, else 2 (1 if the row does
//   not divide);
//   launch: block = compute_block_size(hidden / kVec, 256) (a multiple of the 32-lane wave, at least one wave, at
//   most 256); grid = compute_global_for(rows * block, over = 256): min(rows, (270336 / block) * 256) blocks, and
//   block::run walks the rows with a grid stride (row = i / block over i < rows * block);
//   per row (reduce::block): the row is loaded ONCE into registers as float vectors (r.inner with convert<float>,
//   max_local_stride_iterations = cdiv(hidden / kVec, block) vectors per thread, element j = local + d * block);
//   ONE reduction of the pair (mean, mean of squares): each element contributes x * (1 / n) and
//   (x * sqrt(1 / n))^2 (scaled before squaring to keep low precision from overflowing), the vector lanes summed
//   first; block_reduce: per-thread sum, a wave reduction (the DPP reduction of AMD, 32-lane shuffles here) whose
//   LAST LANE writes the wave's partial to shared memory, __syncthreads(), then EVERY thread sums the partials
//   serially; variance = mean_x2 - mean_x^2, rsqrt(variance + eps);
//   the normalized value (x - mean) * rsqrt is ROUNDED TO FP16 (convert<vec_type<T>>) and handed to the fused
//   pointwise post_layernorm(x, gamma, beta) = add(mul(x, gamma), beta) in fp16, which clang contracts into one fp16
//   fma (__hfma here); vectors of kVec halves stored whole.
// Fixed: block_reduce's __shared__ partials are the same buffer for every row a block walks, and nothing separates
// the serial read of one row's partials from the next row's writes: when the grid is capped (more than 270336
// rows) a fast wave overwrote a partial a slow wave was still reading. A __syncthreads() after the read.
// Changed: the JIT compile (shapes, eps and the post op baked into generated source) became templates instantiated
// by a C++ launcher with device pointers, sizes, eps and a stream; the row count and eps are kernel arguments; the
// device query (get_cu_count, get_max_workitems_per_cu) is the constants 132 and 2048 (H100 / H200); the wave is 32
// lanes (CDNA's is 64).
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace migraphx {

using index_int = uint32_t;

constexpr index_int kWavefrontSize = 32;  // MIGRAPHX_WAVEFRONTSIZE
constexpr size_t kCuCount = 132;
constexpr size_t kMaxWorkitemsPerCu = 2048;
constexpr size_t kMaxGlobal = kCuCount * kMaxWorkitemsPerCu;

// vec<T, N>: an N-wide vector loaded and stored whole (MIGraphX's ext_vector_type)
template <typename T, index_int N>
struct alignas(sizeof(T) * N) vec {
  T data[N];
};

__host__ __device__ constexpr index_int round_up_to_wave(index_int n) {
  return ((n - 1) / kWavefrontSize + 1) * kWavefrontSize;
}

// gpu::compute_block_size: whole waves covering n, at least one, at most max_block_size
__host__ __device__ constexpr index_int compute_block_size(index_int n, index_int max_block_size) {
  return round_up_to_wave(n) > max_block_size ? max_block_size : round_up_to_wave(n);
}

template <index_int kHidden, index_int kVec>
struct layernorm_shape {
  static constexpr index_int relements = kHidden / kVec;                        // vectors per row
  static constexpr index_int nlocal = compute_block_size(relements, 256);      // MIGRAPHX_NLOCAL
  static constexpr index_int iterations = (relements + nlocal - 1) / nlocal;   // max_local_stride_iterations
  static constexpr index_int nwaves = nlocal / kWavefrontSize;
};

__device__ __forceinline__ float wave_reduce_sum(float x) {
  for (int mask = kWavefrontSize / 2; mask > 0; mask /= 2) x += __shfl_xor_sync(0xffffffff, x, mask);
  return x;
}

/* kerntune:
args  = ["x: in f16[rows * 5120]", "gamma: in f16[5120]", "beta: in f16[5120]", "output: out f16[rows * 5120]",
         "rows: u32 = rows", "eps: f32 = 1e-5"]
sizes = [{ rows = 16384 }, { rows = 4 }, { rows = 1001 }]
grid  = "min(rows, 270336)"
block = 256
template_args = ["__half", "5120", "8"]
*/
template <typename T, index_int kHidden, index_int kVec>
__global__ void __launch_bounds__(layernorm_shape<kHidden, kVec>::nlocal)
    layernorm_mul_add_kernel(const T* x, const T* gamma, const T* beta, T* output, index_int rows, float eps) {
  using shape = layernorm_shape<kHidden, kVec>;
  using vec_t = vec<T, kVec>;
  constexpr index_int nlocal = shape::nlocal;
  constexpr index_int n = shape::relements;

  // block_reduce's partials: one (mean, mean of squares) pair per wave
  __shared__ float buffer[shape::nwaves][2];

  const index_int local = threadIdx.x;
  const index_int global = blockIdx.x * nlocal + local;
  const index_int nglobal = gridDim.x * nlocal;  // MIGRAPHX_NGLOBAL
  const vec_t* xv = reinterpret_cast<const vec_t*>(x);
  const vec_t* gv = reinterpret_cast<const vec_t*>(gamma);
  const vec_t* bv = reinterpret_cast<const vec_t*>(beta);
  vec_t* ov = reinterpret_cast<vec_t*>(output);

  // block::run: the output index i / nlocal is the row
  for (index_int i = global; i < rows * nlocal; i += nglobal) {
    const index_int row = i / nlocal;
    const vec_t* xrow = xv + row * n;
    vec_t* orow = ov + row * n;

    // r.inner: the row in registers, converted to float
    float input[shape::iterations][kVec];
#pragma unroll
    for (index_int d = 0; d < shape::iterations; ++d) {
      const index_int j = local + d * nlocal;
      if (j < n) {
        const vec_t v = xrow[j];
#pragma unroll
        for (index_int k = 0; k < kVec; ++k) input[d][k] = static_cast<float>(v.data[k]);
      }
    }

    // r.reduce(sum, (0, 0), x -> (x / n, (x * sqrt(1 / n))^2))
    constexpr float relements_r = 1.0 / kHidden;
    const float relements_rsqrt = sqrtf(relements_r);
    float acc_mean = 0.0f, acc_mean2 = 0.0f;
#pragma unroll
    for (index_int d = 0; d < shape::iterations; ++d) {
      const index_int j = local + d * nlocal;
      if (j < n) {
        float lane_mean = input[d][0] * relements_r;
        float s = input[d][0] * relements_rsqrt;
        float lane_mean2 = s * s;
#pragma unroll
        for (index_int k = 1; k < kVec; ++k) {  // final_reduce: the vector's lanes
          lane_mean += input[d][k] * relements_r;
          s = input[d][k] * relements_rsqrt;
          lane_mean2 += s * s;
        }
        acc_mean += lane_mean;
        acc_mean2 += lane_mean2;
      }
    }
    acc_mean = wave_reduce_sum(acc_mean);
    acc_mean2 = wave_reduce_sum(acc_mean2);
    if ((local % kWavefrontSize) == kWavefrontSize - 1) {
      buffer[local / kWavefrontSize][0] = acc_mean;
      buffer[local / kWavefrontSize][1] = acc_mean2;
    }
    __syncthreads();
    float mean_x = 0.0f, mean_x2 = 0.0f;
    for (index_int w = 0; w < shape::nwaves; w++) {
      mean_x += buffer[w][0];
      mean_x2 += buffer[w][1];
    }
    __syncthreads();  // the next row reuses buffer (fixed)

    const float variance = mean_x2 - mean_x * mean_x;
    const float rsqrt_val = rsqrtf(variance + eps);

    // r.inner(y = post(convert<T>((x - mean) * rsqrt), gamma, beta))
#pragma unroll
    for (index_int d = 0; d < shape::iterations; ++d) {
      const index_int j = local + d * nlocal;
      if (j < n) {
        const vec_t g = gv[j];
        const vec_t b = bv[j];
        vec_t y;
#pragma unroll
        for (index_int k = 0; k < kVec; ++k) {
          const T normed = T((input[d][k] - mean_x) * rsqrt_val);
          y.data[k] = __hfma(normed, g.data[k], b.data[k]);  // add(mul(x, gamma), beta), contracted
        }
        orow[j] = y;
      }
    }
  }
}

// vectorize::elements(ctx, axis, inputs): the widest of 8 (broadcast inputs), 4, 2 the problem size allows and the
// row length divides
inline index_int vectorize_elements(size_t nelements, index_int axis_len) {
  const size_t over = nelements / kMaxGlobal;
  index_int sizes[3];
  int nsizes = 0;
  if (over > 8) sizes[nsizes++] = 8;
  if (over > 4) sizes[nsizes++] = 4;
  sizes[nsizes++] = 2;
  for (int i = 0; i < nsizes; ++i)
    if (axis_len % sizes[i] == 0) return sizes[i];
  return 1;
}

template <index_int kHidden, index_int kVec>
void launch_layernorm(const __half* x, const __half* gamma, const __half* beta, __half* output, index_int rows,
                      float eps, cudaStream_t stream) {
  using shape = layernorm_shape<kHidden, kVec>;
  // compute_global_for(ctx, rows * local, 256)
  const size_t local = shape::nlocal;
  const size_t groups = rows;
  const size_t max_blocks = kMaxGlobal / local;
  const size_t nblocks = groups < max_blocks * 256 ? groups : max_blocks * 256;
  layernorm_mul_add_kernel<__half, kHidden, kVec><<<dim3(nblocks), dim3(local), 0, stream>>>(x, gamma, beta, output,
                                                                                            rows, eps);
}

template <index_int kHidden>
void dispatch_vec(index_int vsize, const __half* x, const __half* gamma, const __half* beta, __half* output,
                  index_int rows, float eps, cudaStream_t stream) {
  switch (vsize) {
    case 8: launch_layernorm<kHidden, 8>(x, gamma, beta, output, rows, eps, stream); break;
    case 4: launch_layernorm<kHidden, 4>(x, gamma, beta, output, rows, eps, stream); break;
    case 2: launch_layernorm<kHidden, 2>(x, gamma, beta, output, rows, eps, stream); break;
    default: launch_layernorm<kHidden, 1>(x, gamma, beta, output, rows, eps, stream); break;
  }
}

}  // namespace migraphx

// LayerNormalization(x, gamma, beta) over the last axis. x, output: device [rows, hidden] fp16; gamma, beta: device
// [hidden] fp16.
void layernorm_mul_add(const __half* x, const __half* gamma, const __half* beta, __half* output, int rows, int hidden,
                       float eps, cudaStream_t stream) {
  using namespace migraphx;
  if (rows == 0) return;
  const index_int vsize = vectorize_elements((size_t)rows * hidden, hidden);
  switch (hidden) {
    case 2560: dispatch_vec<2560>(vsize, x, gamma, beta, output, rows, eps, stream); break;
    case 4096: dispatch_vec<4096>(vsize, x, gamma, beta, output, rows, eps, stream); break;
    case 5120: dispatch_vec<5120>(vsize, x, gamma, beta, output, rows, eps, stream); break;
    default: fprintf(stderr, "layernorm_mul_add: no kernel compiled for hidden size %d\n", hidden); break;
  }
}
