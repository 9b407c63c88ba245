/* kerntune-expert:
name = "block_quant_2d"
family = "group_quant"
description = "Block-wise fp8 e4m3 quantization with one fp32 scale per 2-D tile of TR x TC elements of a row-major [rows, cols] matrix (DeepSeek-V3 / DeepGEMM's per_block_cast_to_fp8 128 x 128 weight blocks, vLLM's and SGLang's block fp8 linear, Transformer Engine's 2-D block scaling): one block of THREADS threads per tile, the tile read once into registers (16-byte loads, VEC elements each), its absolute maximum by warp shuffles and one barrier, the scale from it, VEC quantized bytes per store; partial edge tiles masked."
function = "kt::tile_quant"
roles = ["x: in T[rows * cols]", "q: out Q[rows * cols]", "scales: out f32[cdiv(rows, tile_rows) * cdiv(cols, tile_cols)]", "rows: i32", "cols: i32", "tile_rows: i32 (a template argument)", "tile_cols: i32 (a template argument)", "eps: f32", "qmin: f32", "qmax: f32", "scale_row_stride: i32", "scale_col_stride: i32"]
constraints = ["VEC * ESIZE <= 16", "tile_cols <= THREADS * VEC", "THREADS * VEC <= tile_rows * tile_cols", "tile_rows * tile_cols <= THREADS * 64", "THREADS * MINB <= 2048"]

[params.THREADS]
values = [128, 256, 512, 1024]
default = 256
kind = "block_size"
why = "threads per tile (one tile a block; each thread holds tile_rows * tile_cols / THREADS values in registers)"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load: 16 bytes at most; scalar fallback when cols or a pointer is not aligned"

[params.MINB]
values = [1, 2, 3, 4]
default = 1
kind = "launch_bounds"
why = "blocks per SM ptxas keeps registers for (__launch_bounds__'s second argument): more tiles in flight per SM, at the price of spills where the tile's registers do not fit"

[launch]
grid = ["cdiv(cols, tile_cols)", "cdiv(rows, tile_rows)"]
block = ["THREADS"]
bounds = "THREADS"
min_blocks = "MINB"
smem = "0"
*/
// kt:bind KT_EXPERT_SCALE_RECIP = 2  (how the values meet the tile's scale: 0 divided by scale = amax / qmax; 1 multiplied by 1 / scale; 2 multiplied by the factor qmax / amax computed directly (DeepGEMM's x * (448 / amax), Transformer Engine's scale = fp8_max / amax))
// kt:bind KT_EXPERT_SCALE_STORE = 0  (what is stored per tile: 0 the scale amax / qmax (DeepGEMM's sf); 1 the inverse of the factor, 1 / (qmax / amax) (Transformer Engine's scale_inv); with KT_EXPERT_SCALE_RECIP 2 only)
// kt:bind KT_EXPERT_ZERO_TILE = 0  (0: the tile's amax floored at eps, max(amax, eps); 1: a tile whose amax (after the eps floor; eps 0 where the kernel has none) is not above 0 gets the scale (or factor) 1 (Transformer Engine's compute_scale_from_amax, amax > 0 ? 448 / amax : 1))
// kt:bind KT_EXPERT_SCALE_POW2 = 0  (0: the scale as computed; 1: amax / qmax rounded up to a power of two, exp2f(ceilf(log2f(.))) (DeepGEMM's per_block_cast_to_fp8 with use_ue8m0); with KT_EXPERT_SCALE_RECIP 0 or 1)
// kt:bind KT_EXPERT_CLAMP = 0  (0: the saturating conversion alone (satfinite); 1: clamped to [qmin, qmax] first (fminf(fmaxf)))
#include <cuda_fp8.h>
#ifndef KT_THREADS
#define KT_THREADS 256
#endif
#ifndef KT_VEC
#define KT_VEC 8
#endif
#ifndef KT_MINB
#define KT_MINB 1
#endif

namespace kt {

// fp8 e4m3 as a byte: round to nearest even, saturating to the largest finite value (what __nv_fp8_e4m3(float) does)
__device__ __forceinline__ uint8_t tile_fp8(float v) {
  return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

// One TR x TC tile of the row-major [rows, cols] matrix per block (blockIdx.x the tile's column, blockIdx.y its
// row). Thread t holds VEC consecutive elements of tile column (t % (TC / VEC)) * VEC in tile rows t / (TC / VEC)
// + i * STEP, i < IT (a warp reads whole 16-byte runs of a row; STEP = THREADS * VEC / TC rows a sweep). The tile
// is read once into registers; elements outside the matrix read as 0 and are not stored. The scale of tile (tr, tc)
// is stored at scales[tr * s_row + tc * s_col] (row-major: s_row = cdiv(cols, TC), s_col = 1).
template <typename T, typename Q, int TR, int TC>
__device__ __forceinline__ void tile_quant(const T* __restrict__ x, Q* __restrict__ q, float* __restrict__ scales,
                                          int rows, int cols, float eps, float qmin, float qmax, int s_row,
                                          int s_col) {
  constexpr int VPR = TC / KT_VEC;          // vectors per tile row
  constexpr int STEP = KT_THREADS / VPR;    // tile rows a sweep of the block covers
  constexpr int IT = TR / STEP;             // vectors per thread
  constexpr int W = KT_THREADS / 32;
  static_assert(TC % KT_VEC == 0 && KT_THREADS % VPR == 0 && TR % STEP == 0 && IT >= 1,
                "power-of-two tiles, TC <= THREADS * VEC <= TR * TC");
  static_assert(KT_THREADS % 32 == 0 && W <= 32, "whole warps, at most 32");
  const int tr = blockIdx.y, tc = blockIdx.x;
  const long long row = (long long)tr * TR + threadIdx.x / VPR;  // the thread's first row
  const int col = tc * TC + (int)(threadIdx.x % VPR) * KT_VEC;
  const long long left = (long long)rows - row;  // rows of the matrix from the thread's first: i * STEP < left
  const long long off = row * cols + col, step = (long long)STEP * cols;
  const uintptr_t am = sizeof(T) * KT_VEC - 1, qm = sizeof(Q) * KT_VEC - 1;
  const bool vec = (cols % KT_VEC) == 0 && ((uintptr_t)x & am) == 0 && ((uintptr_t)q & qm) == 0;
  Vec<T, KT_VEC> v[IT];
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    const bool in = i * STEP < left;
    if (vec) {
      if (in && col < cols) {
        v[i] = *reinterpret_cast<const Vec<T, KT_VEC>*>(x + off + i * step);
      } else {
#pragma unroll
        for (int j = 0; j < KT_VEC; ++j) v[i].v[j] = from_f<T>(0.f);
      }
    } else {
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) v[i].v[j] = in && col + j < cols ? x[off + i * step + j] : from_f<T>(0.f);
    }
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) m = fmaxf(m, fabsf(to_f(v[i].v[j])));
  }
  // the tile's absolute maximum: warp shuffles, the warps' maxima in shared memory, every warp reduces them
  m = warp_reduce<32>(m, Max());
  if (W > 1) {
    __shared__ float kt_part[W];
    if ((threadIdx.x & 31) == 0) kt_part[threadIdx.x >> 5] = m;
    __syncthreads();
    m = warp_reduce<32>((int)(threadIdx.x & 31) < W ? kt_part[threadIdx.x & 31] : 0.f, Max());
  }
  m = fmaxf(m, eps);
#if KT_EXPERT_SCALE_RECIP == 2  // kt:bind
#if KT_EXPERT_ZERO_TILE  // kt:bind
  const float factor = m > 0.f ? qmax / m : 1.f;  // an all-zero tile: 1
#else  // kt:bind
  const float factor = qmax / m;
#endif  // kt:bind
#if KT_EXPERT_SCALE_STORE  // kt:bind
  const float stored = 1.f / factor;
#elif KT_EXPERT_ZERO_TILE  // kt:bind
  const float stored = m > 0.f ? m / qmax : 1.f;
#else  // kt:bind
  const float stored = m / qmax;
#endif  // kt:bind
#else  // kt:bind
#if KT_EXPERT_ZERO_TILE  // kt:bind
  float scale = m > 0.f ? m / qmax : 1.f;  // an all-zero tile: 1
#else  // kt:bind
  float scale = m / qmax;
#endif  // kt:bind
#if KT_EXPERT_SCALE_POW2  // kt:bind
  scale = exp2f(ceilf(log2f(scale)));  // a power of two: 1 / scale is exact
#endif  // kt:bind
#if KT_EXPERT_SCALE_RECIP  // kt:bind
  const float factor = 1.f / scale;
#endif  // kt:bind
  const float stored = scale;
#endif  // kt:bind
  if (threadIdx.x == 0) scales[(long long)tr * s_row + (long long)tc * s_col] = stored;
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    const bool in = i * STEP < left;
    Vec<Q, KT_VEC> t;
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
#if KT_EXPERT_SCALE_RECIP  // kt:bind
      float y = to_f(v[i].v[j]) * factor;
#else  // kt:bind
      float y = to_f(v[i].v[j]) / scale;
#endif  // kt:bind
#if KT_EXPERT_CLAMP  // kt:bind
      y = fminf(fmaxf(y, qmin), qmax);
#endif  // kt:bind
      t.v[j] = (Q)tile_fp8(y);
    }
    if (vec) {
      if (in && col < cols) *reinterpret_cast<Vec<Q, KT_VEC>*>(q + off + i * step) = t;
    } else {
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j)
        if (in && col + j < cols) q[off + i * step + j] = t.v[j];
    }
  }
}

}  // namespace kt
