// Merge of two unnormalized attention states in the style of dllm_parallel (a diffusion-LLM parallel-decoding
// code base: its DFlash CUDA extension, merge_state_kernel behind dflash_merge_state_cuda, which folds the partial
// attention of one KV chunk into a running state), fp32 throughout:
//   the state is UNNORMALIZED (the online-softmax triple, not an output and an lse): numerator [rows, head_dim]
//   = sum_j exp(s_j - m) v_j, m [rows] the running max, l [rows] = sum_j exp(s_j - m); rows = B * H * Q flattened
//   next_m = max(m, m_in); safe_m = next_m if finite else 0; weights w = isfinite(x) ? expf(x - safe_m) : 0 (an
//   empty state with m = -inf contributes nothing and no NaN appears); numerator = w_old * numerator + w_new *
//   numerator_in, l = w_old * l + w_new * l_in, m = next_m: IN PLACE on (numerator, m, l), the output normalized
//   later by numerator / l
//   launch: a WARP PER ROW, 8 warps per block (constexpr kThreadsPerBlock = 256), persistent grid-stride over rows
//   with grid = min(max(1, ceil(rows * 32 / 256)), kMaxGridBlocks = 4096); lane 0 reads m, m_in (and l, l_in) and
//   __shfl_sync broadcasts the maxima; lanes stride head_dim by 32; int64 sizes; anonymous namespace; argument order
//   (numerator, m, l, incoming_numerator, incoming_m, incoming_l, head_dim, rows)
// The torch::Tensor wrapper (sizes from numerator.size(3) and m.numel()) is replaced by device pointers, sizes and
// a stream. No bug found.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpSize;
constexpr int kMaxGridBlocks = 4096;

__device__ __forceinline__ float finite_weight(float value, float maximum) {
  return isfinite(value) ? expf(value - maximum) : 0.0f;
}

/* kerntune:
args  = ["numerator: inout f32[rows * D]", "m: inout f32[rows] ~ uniform(-4, 12)", "l: inout f32[rows] ~ uniform(1, 64)",
         "incoming_numerator: in f32[rows * D]", "incoming_m: in f32[rows] ~ uniform(-4, 12)",
         "incoming_l: in f32[rows] ~ uniform(1, 64)", "head_dim: i64 = D", "rows: i64 = rows"]
sizes = [{ rows = 131072, D = 128 }, { rows = 128, D = 128 }, { rows = 6993, D = 96 }]
grid  = "min(cdiv(rows * 32, 256), 4096)"
block = 256
*/
__global__ void merge_state_kernel(
    float* __restrict__ numerator,
    float* __restrict__ m,
    float* __restrict__ l,
    const float* __restrict__ incoming_numerator,
    const float* __restrict__ incoming_m,
    const float* __restrict__ incoming_l,
    int64_t head_dim,
    int64_t rows) {
  const int warp_id = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + warp_id;
       row < rows;
       row += int64_t(gridDim.x) * kWarpsPerBlock) {
    float old_m = lane == 0 ? m[row] : 0.0f;
    float new_m = lane == 0 ? incoming_m[row] : 0.0f;
    float old_l = lane == 0 ? l[row] : 0.0f;
    float new_l = lane == 0 ? incoming_l[row] : 0.0f;
    old_m = __shfl_sync(0xffffffff, old_m, 0);
    new_m = __shfl_sync(0xffffffff, new_m, 0);
    const float next_m = fmaxf(old_m, new_m);
    const float safe_m = isfinite(next_m) ? next_m : 0.0f;
    const float old_weight = finite_weight(old_m, safe_m);
    const float new_weight = finite_weight(new_m, safe_m);
    const int64_t offset = row * head_dim;
    for (int64_t d = lane; d < head_dim; d += kWarpSize) {
      numerator[offset + d] =
          old_weight * numerator[offset + d] +
          new_weight * incoming_numerator[offset + d];
    }
    if (lane == 0) {
      l[row] = old_weight * old_l + new_weight * new_l;
      m[row] = next_m;
    }
  }
}

int blocks_for(int64_t work) {
  const int64_t blocks = (work + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(blocks, kMaxGridBlocks)));
}

}  // namespace

// numerator: device [B, H, Q, head_dim] f32 and m, l: [B, H, Q] f32, the running state, updated in place;
// incoming_*: the state of one more chunk, same shapes.
void dflash_merge_state_cuda(float* numerator, float* m, float* l, const float* incoming_numerator,
                             const float* incoming_m, const float* incoming_l, int64_t rows, int64_t head_dim,
                             cudaStream_t stream) {
  if (rows == 0 || head_dim == 0) {
    return;
  }
  merge_state_kernel<<<blocks_for(rows * kWarpSize), kThreadsPerBlock, 0, stream>>>(
      numerator, m, l, incoming_numerator, incoming_m, incoming_l, head_dim, rows);
}
