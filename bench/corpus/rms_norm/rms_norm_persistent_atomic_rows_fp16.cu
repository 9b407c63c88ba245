// RMSNorm (fp16 activations, fp32 weight) with a persistent grid and dynamic work stealing, as persistent-kernel
// serving code schedules rows: the host launches a fixed grid sized to the GPU (kNumSMs * kBlocksPerSM blocks of
// kWarpsPerBlock warps), and every warp repeatedly takes the next row from a global row counter with atomicAdd
// (lane 0 draws the ticket, __shfl_sync hands it to the warp) until the tickets run past the last row. One warp
// per row: sum of squares in fp32 over the row in global memory, an xor butterfly, then a second pass writing
//   y = fp16(x * rsqrt(mean(x^2) + eps) * w)
// in fp32 with one rounding at the store.
//
// The counter: row_counter is one int in device memory that the caller zeroes once when it allocates it. Each
// warp draws exactly one ticket >= rows (the one that ends its loop), so a launch draws rows + total_warps tickets
// in all and the warp holding the last one, rows + total_warps - 1, is the last to touch the counter: it puts it
// back to 0. The counter is thus zero again when the kernel ends, ready for the next launch on the stream (and
// for CUDA graph replays) without a memset; two launches sharing one counter must not overlap.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace persistent_norm {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = kWarpsPerBlock * kWarpSize;
constexpr int kNumSMs = 132;  // H100 SXM
constexpr int kBlocksPerSM = 4;
constexpr int kGridBlocks = kNumSMs * kBlocksPerSM;

/* kerntune:
args  = ["out: out f16[rows * hidden]", "input: in f16[rows * hidden]", "weight: in f32[hidden]",
         "row_counter: inout i32[1] ~ zeros", "rows: i32 = rows", "hidden: i32 = hidden", "eps: f32 = 1e-6"]
sizes = [{ rows = 8192, hidden = 4096 }, { rows = 8, hidden = 8192 }, { rows = 1001, hidden = 4097 }]
grid  = "132 * 4"
block = 128
*/
__global__ void __launch_bounds__(kThreads)
rms_norm_persistent_kernel(__half* __restrict__ out,          // [rows, hidden]
                           const __half* __restrict__ input,  // [rows, hidden]
                           const float* __restrict__ weight,  // [hidden]
                           int* __restrict__ row_counter,     // [1], zero on entry and on exit
                           const int rows, const int hidden, const float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int total_warps = gridDim.x * (blockDim.x / kWarpSize);

  while (true) {
    int row = 0;
    if (lane == 0) row = atomicAdd(row_counter, 1);
    row = __shfl_sync(0xffffffffu, row, 0);
    if (row >= rows) {
      // this warp's one ticket past the end; the last ticket of the launch resets the counter (see above)
      if (lane == 0 && row == rows + total_warps - 1) atomicExch(row_counter, 0);
      break;  // the whole warp leaves together; nothing below synchronizes the block
    }

    const __half* x = input + static_cast<int64_t>(row) * hidden;
    __half* y = out + static_cast<int64_t>(row) * hidden;

    float sum_sq = 0.0f;
    for (int i = lane; i < hidden; i += kWarpSize) {
      const float v = __half2float(x[i]);
      sum_sq += v * v;
    }
#pragma unroll
    for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, mask);
    const float inv_rms = rsqrtf(sum_sq / static_cast<float>(hidden) + eps);

    for (int i = lane; i < hidden; i += kWarpSize) {
      y[i] = __float2half(__half2float(x[i]) * inv_rms * weight[i]);
    }
  }
}

}  // namespace persistent_norm

// out, input: [rows, hidden] contiguous fp16; weight: [hidden] fp32; row_counter: one device int, zeroed by the
// caller once at allocation (the kernel leaves it zeroed). The grid is fixed, whatever the row count.
void rms_norm_persistent_fp16(__half* out, const __half* input, const float* weight, int* row_counter, int rows,
                              int hidden, float eps, cudaStream_t stream) {
  if (rows == 0 || hidden == 0) return;
  const dim3 grid(persistent_norm::kGridBlocks);
  const dim3 block(persistent_norm::kThreads);
  persistent_norm::rms_norm_persistent_kernel<<<grid, block, 0, stream>>>(out, input, weight, row_counter, rows,
                                                                           hidden, eps);
}
