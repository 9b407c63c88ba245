// Per-token-group FP8 (e4m3) activation quantization with UE8M0 scales packed four to an int32, in the style of
// the DeepGEMM / SGLang fp8 paths for block-scaled GEMMs whose scale factors are power-of-two exponents. x
// [num_tokens, hidden] bf16 is split into groups of kGroupSize = 128 along hidden; each group gets the scale
// 2^ceil(log2(max(absmax, eps) / 448)), kept only as its biased exponent byte (UE8M0: scale = 2^(e - 127)), and
// q = clamp(x / scale, -448, 448) in e4m3. The exponent bytes are packed along the group dimension: output_s is
// int32 [num_tokens, ceil(groups_per_row / 4)], byte k (little-endian, bits 8k..8k+7) of word w holding group
// 4w + k; the bytes of a token's last word past its last group are zero.
// 16 lanes per group, each lane one 16-byte load of 8 bf16 and one 8-byte store of 8 e4m3; 8 groups (two packed
// words) per block of 128 threads, a 2-D grid (token, chunk of 8 groups of the row). Four groups share a word and
// two warps share a block, so each group's lane 0 leaves its exponent in shared memory and, after the barrier,
// one thread per word assembles and stores it. Groups of the last chunk past the end of the row load and store
// nothing but still reach the barrier.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

constexpr int kGroupSize = 128;
constexpr int kThreadsPerGroup = 16;
constexpr int kElemsPerThread = kGroupSize / kThreadsPerGroup;  // 8 bf16 = one 16-byte load
constexpr int kScalesPerWord = 4;                               // UE8M0 bytes in one int32
constexpr int kGroupsPerBlock = 8;
constexpr int kWordsPerBlock = kGroupsPerBlock / kScalesPerWord;
constexpr int kThreads = kGroupsPerBlock * kThreadsPerGroup;  // 128
constexpr float kFp8E4m3Max = 448.0f;

static_assert(kElemsPerThread == 8, "one uint4 of bf16 per lane");
static_assert(kGroupsPerBlock % kScalesPerWord == 0, "a block owns whole packed words");

struct alignas(8) fp8x8_t {
  __nv_fp8_e4m3 v[kElemsPerThread];
};

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// biased exponent of the smallest power of two >= x (x > 0, finite, normal): the float's exponent field, plus one
// when any mantissa bit is set
__device__ __forceinline__ uint32_t ue8m0_round_up(float x) {
  const uint32_t bits = __float_as_uint(x);
  uint32_t exponent = (bits >> 23) & 0xffu;
  if (bits & 0x007fffffu) exponent += 1u;
  return exponent;
}

/* kerntune:
args  = ["input: in bf16[num_tokens * hidden]", "output_q: out u8[num_tokens * hidden]",
         "output_s: out i32[num_tokens * cdiv(hidden / 128, 4)]",
         "hidden: i32 = hidden", "groups_per_row: i32 = hidden / 128",
         "packed_cols: i32 = cdiv(hidden / 128, 4)", "eps: f32 = 1e-10"]
sizes = [{ num_tokens = 8192, hidden = 7168 }, { num_tokens = 16, hidden = 4864 },
         { num_tokens = 999, hidden = 3200 }]
grid  = ["num_tokens", "cdiv(hidden / 128, 8)"]
block = "128"
*/
__global__ void per_token_group_quant_fp8_ue8m0_packed_kernel(const __nv_bfloat16* __restrict__ input,
                                                              __nv_fp8_e4m3* __restrict__ output_q,
                                                              int32_t* __restrict__ output_s, int hidden,
                                                              int groups_per_row, int packed_cols, float eps) {
  __shared__ uint8_t s_exponent[kGroupsPerBlock];

  const int token = blockIdx.x;
  const int local_group = threadIdx.x / kThreadsPerGroup;
  const int lane = threadIdx.x % kThreadsPerGroup;
  const int group_col = blockIdx.y * kGroupsPerBlock + local_group;  // the group's index inside the token's row
  const bool valid = group_col < groups_per_row;                     // false only in a row's last chunk

  const int64_t offset =
      static_cast<int64_t>(token) * hidden + static_cast<int64_t>(group_col) * kGroupSize + lane * kElemsPerThread;

  float vals[kElemsPerThread];
  float absmax = 0.0f;
  if (valid) {
    const uint4 raw = *reinterpret_cast<const uint4*>(input + offset);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int p = 0; p < kElemsPerThread / 2; ++p) {
      const float2 f = __bfloat1622float2(pairs[p]);
      vals[2 * p] = f.x;
      vals[2 * p + 1] = f.y;
      absmax = fmaxf(absmax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  } else {
#pragma unroll
    for (int e = 0; e < kElemsPerThread; ++e) vals[e] = 0.0f;
  }

  // every thread of the block reaches this point (blockDim is a multiple of 32 and nobody has returned), so the
  // full mask is exact; xor offsets below 16 keep the reduction inside the group's half-warp
#pragma unroll
  for (int mask = kThreadsPerGroup / 2; mask > 0; mask >>= 1) {
    absmax = fmaxf(absmax, __shfl_xor_sync(0xffffffffu, absmax, mask));
  }

  const uint32_t exponent = ue8m0_round_up(fmaxf(absmax, eps) / kFp8E4m3Max);
  const float scale = __uint_as_float(exponent << 23);  // 2^(exponent - 127)
  const float inv_scale = 1.0f / scale;                 // exact: a power of two

  if (valid) {
    fp8x8_t packed;
#pragma unroll
    for (int e = 0; e < kElemsPerThread; ++e) {
      const float q = fminf(fmaxf(vals[e] * inv_scale, -kFp8E4m3Max), kFp8E4m3Max);
      packed.v[e] = __nv_fp8_e4m3(q);
    }
    *reinterpret_cast<fp8x8_t*>(output_q + offset) = packed;
    if (lane == 0) s_exponent[local_group] = static_cast<uint8_t>(exponent);
  }
  __syncthreads();

  // one thread per packed word of this block: group 4w + k goes to byte k of word w; bytes past the row's last
  // group stay zero
  if (threadIdx.x < kWordsPerBlock) {
    const int word = blockIdx.y * kWordsPerBlock + threadIdx.x;
    if (word < packed_cols) {
      uint32_t packed_word = 0u;
#pragma unroll
      for (int k = 0; k < kScalesPerWord; ++k) {
        const int local = threadIdx.x * kScalesPerWord + k;
        if (blockIdx.y * kGroupsPerBlock + local < groups_per_row) {
          packed_word |= static_cast<uint32_t>(s_exponent[local]) << (8 * k);
        }
      }
      output_s[static_cast<int64_t>(token) * packed_cols + word] = static_cast<int32_t>(packed_word);
    }
  }
}

// input: [num_tokens, hidden] bf16, hidden a multiple of 128; output_q: [num_tokens, hidden] e4m3;
// output_s: [num_tokens, ceil(hidden / 128 / 4)] int32 of packed UE8M0 exponent bytes
void per_token_group_quant_fp8_ue8m0_packed(const __nv_bfloat16* input, __nv_fp8_e4m3* output_q, int32_t* output_s,
                                            int num_tokens, int hidden, float eps, cudaStream_t stream) {
  const int groups_per_row = hidden / kGroupSize;
  const int packed_cols = ceil_div(groups_per_row, kScalesPerWord);
  dim3 grid(num_tokens, ceil_div(groups_per_row, kGroupsPerBlock));
  dim3 block(kThreads);
  per_token_group_quant_fp8_ue8m0_packed_kernel<<<grid, block, 0, stream>>>(input, output_q, output_s, hidden,
                                                                            groups_per_row, packed_cols, eps);
}
