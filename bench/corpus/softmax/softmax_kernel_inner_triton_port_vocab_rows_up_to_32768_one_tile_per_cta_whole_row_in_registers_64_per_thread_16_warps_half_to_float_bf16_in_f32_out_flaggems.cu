// Last-dim softmax in the style of FlagGems (FlagOpen/FlagGems, src/flag_gems/ops/softmax.py: softmax_kernel_inner
// launched by softmax(self, dim, half_to_float) when K = numel / (M * N) == 1, its heuristics from
// runtime/backend/_nvidia/heuristics_config_utils.py; FlagGems is BAAI's library of Triton operators that replace
// PyTorch ATen kernels), written as the CUDA port of that Triton program, on the half_to_float path of aten::_softmax
// (bf16 logits in, fp32 probabilities out, e.g. sampling probabilities over a vocabulary):
//   self [M, N] bf16 contiguous, out [M, N] fp32; one program per row, grid (M, 1, 1).
//   Heuristics: TILE_N = next_power_of_2(N) while N <= 32768, else 4096; ONE_TILE_PER_CTA = TILE_N >= N;
//   num_warps 4 / 8 / 16 for TILE_N < 2048 / < 4096 / otherwise. TILE_N, num_warps and ONE_TILE_PER_CTA are template
//   arguments here (spec: <32768, 16 warps, true>, what vocabularies of 16385 to 32768 entries take).
//   One-tile path (N <= 32768): the WHOLE row is one masked tile held in registers (TILE_N = 32768 over 512 threads:
//   64 values per thread), loaded once and cast to the output dtype (fp32) before anything else, masked lanes -inf;
//   m = max, e = exp(x - m) kept in the same registers, z = sum(e), out = e / z, stored once: one read and one write
//   of the row, no second pass over global memory.
//   Multi-tile path (N > 32768, the other instantiation): every lane of a 4096-wide tile keeps its own online
//   (max, sum), the lanes merged once at the end, then a second pass over the tiles in reverse order.
//   Thread t of the program holds lanes [8 (t + 512 c), 8 (t + 512 c) + 8) for c = 0..7 (Triton's blocked layout with
//   16-byte bf16 accesses; scalar loads here, the row start is not 16-byte aligned for odd N); the block max and sum
//   are xor butterflies plus per-warp partials in shared memory; exp is Triton's fp32 exp (ex2.approx of
//   x * log2(e): __expf); the divide is IEEE '/' here (Triton emits div.full.f32, at most an ulp or two away, well
//   inside the tolerance).
// Fixed: the row offset pid_m * N is an int32 product in Triton (pid and N are i32), which wraps once M * N passes
// 2^31 (prompt log-probabilities: 65536 tokens x 32768 classes); it is 64-bit here.
// Changed: the non-inner kernel (K > 1: softmax over a middle dimension) is not ported; tiles smaller than the 128
// threads of 4 warps (N < 65, where Triton replicates lanes) are padded to TILE_N = 128; the torch op became a
// C++ launcher with device pointers, sizes and a stream. Probabilities are ~1/N (3e-5 for 32000 classes), far below
// the default absolute tolerance, hence the small atol.
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace flag_gems {

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }

template <int NUM_WARPS>
__device__ __forceinline__ float program_max(float v, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = scratch[0];
#pragma unroll
  for (int w = 1; w < NUM_WARPS; ++w) r = fmaxf(r, scratch[w]);
  __syncthreads();  // scratch is reused by the next reduction
  return r;
}

template <int NUM_WARPS>
__device__ __forceinline__ float program_sum(float v, float* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = 0.0f;
#pragma unroll
  for (int w = 0; w < NUM_WARPS; ++w) r += scratch[w];
  __syncthreads();
  return r;
}

/* kerntune:
args  = ["output_ptr: out f32[rows * vocab]", "input_ptr: in bf16[rows * vocab]", "M: i32 = rows", "N: i32 = vocab"]
sizes = [{ rows = 512, vocab = 32000 }, { rows = 4, vocab = 32064 }, { rows = 37, vocab = 32001 }]
grid  = ["rows", 1, 1]
block = 512
template_args = ["__nv_bfloat16", "float", "32768", "16", "true"]
atol  = 1e-8
*/
template <typename TIn, typename TOut, int TILE_N, int NUM_WARPS, bool ONE_TILE_PER_CTA>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    softmax_kernel_inner(TOut* output_ptr, const TIn* input_ptr, int M, int N) {
  constexpr int THREADS = NUM_WARPS * 32;
  constexpr int PER = TILE_N / THREADS;  // lanes of the tile per thread
  constexpr int VEC = PER < 8 ? PER : 8;  // contiguous lanes per access
  constexpr int CHUNKS = PER / VEC;
  static_assert(PER >= 1 && CHUNKS * VEC * THREADS == TILE_N, "the tile must cover whole threads");
  __shared__ float scratch[NUM_WARPS];

  const int64_t pid_m = blockIdx.x;
  input_ptr += pid_m * N;  // 64-bit (fixed)
  output_ptr += pid_m * N;

  if (ONE_TILE_PER_CTA) {
    float e[PER];
    float m = -INFINITY;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int n = (c * THREADS + threadIdx.x) * VEC + j;
        e[c * VEC + j] = n < N ? to_float(input_ptr[n]) : -INFINITY;
        m = fmaxf(m, e[c * VEC + j]);
      }
    }
    m = program_max<NUM_WARPS>(m, scratch);
    float z = 0.0f;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      e[i] = __expf(e[i] - m);
      z += e[i];
    }
    z = program_sum<NUM_WARPS>(z, scratch);
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int n = (c * THREADS + threadIdx.x) * VEC + j;
        if (n < N) output_ptr[n] = static_cast<TOut>(e[c * VEC + j] / z);
      }
    }
    return;
  }

  // one (max, sum) per lane of the tile
  float m[PER], z[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    m[i] = -INFINITY;
    z[i] = 0.0f;
  }
  const int previous_multiple = (N + TILE_N - 1) / TILE_N * TILE_N - TILE_N;  // prev_multiple_of(N, TILE_N)
  for (int start_n = 0; start_n < previous_multiple; start_n += TILE_N) {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int i = c * VEC + j;
        const float inp = to_float(input_ptr[start_n + (c * THREADS + threadIdx.x) * VEC + j]);
        const float m_new = fmaxf(m[i], inp);
        // it is possible that there are -inf's in the input
        if (m_new != -INFINITY) z[i] = z[i] * __expf(m[i] - m_new) + __expf(inp - m_new);
        m[i] = m_new;
      }
    }
  }
  // the last iteration, masked
  for (int start_n = previous_multiple; start_n < N; start_n += TILE_N) {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int i = c * VEC + j;
        const int n = start_n + (c * THREADS + threadIdx.x) * VEC + j;
        const float inp = n < N ? to_float(input_ptr[n]) : -INFINITY;
        const float m_new = fmaxf(m[i], inp);
        if (m_new != -INFINITY) z[i] = z[i] * __expf(m[i] - m_new) + __expf(inp - m_new);
        m[i] = m_new;
      }
    }
  }

  // merge the lanes
  float m_local = -INFINITY;
#pragma unroll
  for (int i = 0; i < PER; ++i) m_local = fmaxf(m_local, m[i]);
  const float m_reduced = program_max<NUM_WARPS>(m_local, scratch);
  float z_local = 0.0f;
#pragma unroll
  for (int i = 0; i < PER; ++i) z_local += z[i] * __expf(m[i] - m_reduced);
  const float z_total = program_sum<NUM_WARPS>(z_local, scratch);

  // the output pass, last tile first (masked), then the full tiles downwards
  {
    const int base = previous_multiple;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int n = base + (c * THREADS + threadIdx.x) * VEC + j;
        if (n < N) output_ptr[n] = static_cast<TOut>(__expf(to_float(input_ptr[n]) - m_reduced) / z_total);
      }
    }
  }
  for (int start_n = TILE_N; start_n < N; start_n += TILE_N) {
    const int base = previous_multiple - start_n;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int n = base + (c * THREADS + threadIdx.x) * VEC + j;
        output_ptr[n] = static_cast<TOut>(__expf(to_float(input_ptr[n]) - m_reduced) / z_total);
      }
    }
  }
}

template <typename TIn, typename TOut, int TILE_N, bool ONE_TILE_PER_CTA>
static void launch_inner(TOut* out, const TIn* self, int M, int N, cudaStream_t stream) {
  // softmax_heur_num_warps_inner
  constexpr int NUM_WARPS = TILE_N < 2048 ? 4 : (TILE_N < 4096 ? 8 : 16);
  const dim3 grid(M, 1, 1);
  softmax_kernel_inner<TIn, TOut, TILE_N, NUM_WARPS, ONE_TILE_PER_CTA>
      <<<grid, NUM_WARPS * 32, 0, stream>>>(out, self, M, N);
}

static int next_power_of_2(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace flag_gems

// softmax(self, dim=-1, half_to_float=True): self device [M, N] (bf16 or fp16, contiguous), out [M, N] fp32.
template <typename T>
void softmax_half_to_float(const T* self, float* out, int M, int N, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  // softmax_heur_tile_n_inner, ONE_TILE_PER_CTA = TILE_N >= N
  int tile_n = N <= 32 * 1024 ? flag_gems::next_power_of_2(N) : 4096;
  if (tile_n < 128) tile_n = 128;
  if (tile_n < N) {
    assert(tile_n == 4096);
    flag_gems::launch_inner<T, float, 4096, false>(out, self, M, N, stream);
    return;
  }
  switch (tile_n) {
    case 128: flag_gems::launch_inner<T, float, 128, true>(out, self, M, N, stream); break;
    case 256: flag_gems::launch_inner<T, float, 256, true>(out, self, M, N, stream); break;
    case 512: flag_gems::launch_inner<T, float, 512, true>(out, self, M, N, stream); break;
    case 1024: flag_gems::launch_inner<T, float, 1024, true>(out, self, M, N, stream); break;
    case 2048: flag_gems::launch_inner<T, float, 2048, true>(out, self, M, N, stream); break;
    case 4096: flag_gems::launch_inner<T, float, 4096, true>(out, self, M, N, stream); break;
    case 8192: flag_gems::launch_inner<T, float, 8192, true>(out, self, M, N, stream); break;
    case 16384: flag_gems::launch_inner<T, float, 16384, true>(out, self, M, N, stream); break;
    case 32768: flag_gems::launch_inner<T, float, 32768, true>(out, self, M, N, stream); break;
    default: assert(false);
  }
}

template void softmax_half_to_float<__nv_bfloat16>(const __nv_bfloat16*, float*, int, int, cudaStream_t);
template void softmax_half_to_float<__half>(const __half*, float*, int, int, cudaStream_t);
