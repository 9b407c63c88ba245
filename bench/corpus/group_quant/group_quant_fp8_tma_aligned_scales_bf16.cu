// Per-token-group FP8 (e4m3) quantization feeding a DeepGEMM-style fp8 GEMM, in the SGLang / DeepGEMM
// "column-major, TMA-aligned scales" layout: x [num_tokens, hidden] bf16 split into groups of kGroupSize along
// hidden, q [num_tokens, hidden] e4m3, one fp32 scale per (token, group) stored column-major as
// [hidden / kGroupSize, scale_stride] with scale_stride = num_tokens rounded up to 16 bytes of floats (a multiple
// of 4), so that each group column starts TMA-aligned; the padding entries are left alone. The group index is flat
// (token-major); 8 lanes own a group, each holding 16 elements from two 16-byte loads (the 8 lanes' first loads
// cover the group's first 64 elements, their second loads the rest), the absolute maximum reduced with xor
// shuffles over 4, 2, 1, scale = max(absmax, eps) / 448, q = clamp(x / scale, -448, 448) through the
// __nv_fp8_e4m3 constructor, written back as 8-byte packs. 32 groups per block of 256 threads; lanes whose group
// is past the end (the last block) take part in the shuffles but neither load nor store.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

constexpr int kLanesPerGroup = 8;
constexpr int kGroupsPerBlock = 32;
constexpr int kVecElems = 8;  // bf16 elements in one 16-byte load
constexpr float kFp8E4m3Max = 448.0f;

struct alignas(8) fp8x8_t {
  __nv_fp8_e4m3 v[kVecElems];
};

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// DeepGEMM's rule for the M extent of a TMA-loaded scale tensor: a multiple of 16 bytes of elements
__host__ __device__ constexpr int get_tma_aligned_size(int x, int element_size) {
  return ceil_div(x, 16 / element_size) * (16 / element_size);
}

/* kerntune:
args  = ["input: in bf16[tokens * hidden]", "output_q: out u8[tokens * hidden]",
         "output_s: out f32[hidden / 128 * round_up(tokens, 4)]",
         "num_groups: i32 = tokens * hidden / 128", "groups_per_row: i32 = hidden / 128",
         "scale_stride: i32 = round_up(tokens, 4)", "eps: f32 = 1e-10"]
sizes = [{ tokens = 8192, hidden = 7168 }, { tokens = 10, hidden = 4096 }, { tokens = 999, hidden = 3200 }]
template_args = ["128"]
grid  = "cdiv(tokens * hidden / 128, 32)"
block = "256"
*/
template <int kGroupSize>
__global__ void per_token_group_quant_fp8_tma_kernel(const __nv_bfloat16* __restrict__ input,
                                                     __nv_fp8_e4m3* __restrict__ output_q,
                                                     float* __restrict__ output_s, int num_groups,
                                                     int groups_per_row, int scale_stride, float eps) {
  static_assert(kGroupSize % (kLanesPerGroup * kVecElems) == 0, "a group is whole 16-byte loads of 8 lanes");
  constexpr int kLoads = kGroupSize / (kLanesPerGroup * kVecElems);  // 2 for 128

  const int lane = threadIdx.x % kLanesPerGroup;
  const int group = blockIdx.x * kGroupsPerBlock + threadIdx.x / kLanesPerGroup;
  const bool valid = group < num_groups;  // false only in the last block

  const __nv_bfloat16* src = input + (int64_t)group * kGroupSize;
  __nv_fp8_e4m3* dst = output_q + (int64_t)group * kGroupSize;

  float vals[kLoads][kVecElems];
  float absmax = 0.0f;
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    uint4 raw = make_uint4(0u, 0u, 0u, 0u);
    if (valid) raw = *reinterpret_cast<const uint4*>(src + j * kLanesPerGroup * kVecElems + lane * kVecElems);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int p = 0; p < kVecElems / 2; ++p) {
      const float2 f = __bfloat1622float2(pairs[p]);
      vals[j][2 * p] = f.x;
      vals[j][2 * p + 1] = f.y;
      absmax = fmaxf(absmax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }

  // every lane of the warp gets here (no early return), so the full mask is exact; xor offsets below 8 stay
  // inside the group's 8 lanes
#pragma unroll
  for (int offset = kLanesPerGroup / 2; offset > 0; offset >>= 1) {
    absmax = fmaxf(absmax, __shfl_xor_sync(0xffffffffu, absmax, offset));
  }

  if (!valid) return;

  const float scale = fmaxf(absmax, eps) / kFp8E4m3Max;
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    fp8x8_t packed;
#pragma unroll
    for (int e = 0; e < kVecElems; ++e) {
      const float v = fminf(fmaxf(vals[j][e] / scale, -kFp8E4m3Max), kFp8E4m3Max);
      packed.v[e] = __nv_fp8_e4m3(v);
    }
    *reinterpret_cast<fp8x8_t*>(dst + j * kLanesPerGroup * kVecElems + lane * kVecElems) = packed;
  }

  if (lane == 0) {
    const int token = group / groups_per_row;
    const int group_col = group % groups_per_row;
    output_s[(int64_t)group_col * scale_stride + token] = scale;
  }
}

// input: [num_tokens, hidden]; output_q: [num_tokens, hidden]; output_s: column-major [hidden / kGroupSize,
// get_tma_aligned_size(num_tokens, 4)], allocated by the caller (torch.empty, padding untouched)
template <int kGroupSize>
void per_token_group_quant_fp8_tma_aligned(const __nv_bfloat16* input, __nv_fp8_e4m3* output_q, float* output_s,
                                           int num_tokens, int hidden, float eps, cudaStream_t stream) {
  const int groups_per_row = hidden / kGroupSize;
  const int num_groups = num_tokens * groups_per_row;
  const int scale_stride = get_tma_aligned_size(num_tokens, static_cast<int>(sizeof(float)));
  constexpr int kThreads = kGroupsPerBlock * kLanesPerGroup;
  const int num_blocks = ceil_div(num_groups, kGroupsPerBlock);
  per_token_group_quant_fp8_tma_kernel<kGroupSize><<<num_blocks, kThreads, 0, stream>>>(
      input, output_q, output_s, num_groups, groups_per_row, scale_stride, eps);
}

template void per_token_group_quant_fp8_tma_aligned<128>(const __nv_bfloat16*, __nv_fp8_e4m3*, float*, int, int,
                                                         float, cudaStream_t);
