// LayerNorm forward with bf16 activations and fp32 gamma / beta (the "mixed dtype" fused LayerNorm of Apex /
// Megatron, where the affine parameters stay in fp32 while the activations are bf16). Welford statistics: each
// thread walks its strided share of the row keeping (count, mean, M2), the triples are merged with Chan's formula
// by a custom operator given to cub::WarpReduce, lane 0 of each warp parks its warp's triple in shared memory, and
// warp 0 merges the kWarps triples with a second cub::WarpReduce (missing lanes contribute the empty triple).
// Thread 0 turns the block's triple into mean and rstd = rsqrt(M2 / cols + eps) (biased variance, as
// torch.nn.LayerNorm) and publishes them through __shared__ floats. A second read of the row writes
// y = bf16((x - mean) * rstd * gamma + beta), fp32 math, one rounding. One row per block of kThreads = 256
// (constexpr, also the __launch_bounds__), argument order (x, gamma, beta, y, rows, cols, eps), scalar loads.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cub/cub.cuh>
#include <cstdint>

namespace layer_norm {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;

struct WelfordTriple {
  float count;
  float mean;
  float m2;  // sum of squared deviations from the mean
};

// Chan et al.'s parallel merge of two Welford triples; two empty triples merge to an empty one
struct WelfordMerge {
  __device__ __forceinline__ WelfordTriple operator()(const WelfordTriple& a, const WelfordTriple& b) const {
    const float count = a.count + b.count;
    if (count == 0.0f) return WelfordTriple{0.0f, 0.0f, 0.0f};
    const float delta = b.mean - a.mean;
    const float b_frac = b.count / count;
    WelfordTriple r;
    r.count = count;
    r.mean = a.mean + delta * b_frac;
    r.m2 = a.m2 + b.m2 + delta * delta * a.count * b_frac;
    return r;
  }
};

/* kerntune:
args  = ["x: in bf16[rows * cols]", "gamma: in f32[cols]", "beta: in f32[cols]", "y: out bf16[rows * cols]",
         "rows: i32 = rows", "cols: i32 = cols", "eps: f32 = 1e-5"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 6, cols = 5120 }, { rows = 1013, cols = 3073 }]
grid  = "rows"
block = "256"
*/
__global__ void __launch_bounds__(kThreads)
    layer_norm_welford_warp_reduce_kernel(const __nv_bfloat16* __restrict__ x, const float* __restrict__ gamma,
                                          const float* __restrict__ beta, __nv_bfloat16* __restrict__ y,
                                          const int rows, const int cols, const float eps) {
  using WarpReduce = cub::WarpReduce<WelfordTriple>;
  __shared__ typename WarpReduce::TempStorage warp_storage[kWarps];
  __shared__ WelfordTriple s_partials[kWarps];
  __shared__ float s_mean;
  __shared__ float s_rstd;

  const int row = blockIdx.x;
  if (row >= rows) return;  // uniform over the block
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t offset = static_cast<int64_t>(row) * cols;

  // each thread's running statistics over its elements (count 0 where cols < kThreads leaves it none)
  WelfordTriple stat{0.0f, 0.0f, 0.0f};
  for (int i = threadIdx.x; i < cols; i += kThreads) {
    const float v = __bfloat162float(x[offset + i]);
    stat.count += 1.0f;
    const float delta = v - stat.mean;
    stat.mean += delta / stat.count;
    stat.m2 += delta * (v - stat.mean);
  }

  // merge within each warp: the result is valid in lane 0
  stat = WarpReduce(warp_storage[warp]).Reduce(stat, WelfordMerge());
  if (lane == 0) s_partials[warp] = stat;
  __syncthreads();

  // merge the warps' triples in warp 0
  if (warp == 0) {
    WelfordTriple partial = lane < kWarps ? s_partials[lane] : WelfordTriple{0.0f, 0.0f, 0.0f};
    partial = WarpReduce(warp_storage[0]).Reduce(partial, WelfordMerge());
    if (lane == 0) {
      s_mean = partial.mean;
      s_rstd = rsqrtf(partial.m2 / static_cast<float>(cols) + eps);
    }
  }
  __syncthreads();
  const float mean = s_mean;
  const float rstd = s_rstd;

  for (int i = threadIdx.x; i < cols; i += kThreads) {
    const float v = __bfloat162float(x[offset + i]);
    y[offset + i] = __float2bfloat16((v - mean) * rstd * gamma[i] + beta[i]);
  }
}

}  // namespace layer_norm

// x, y: [rows, cols] bf16, contiguous; gamma, beta: [cols] fp32.
void layer_norm_bf16_fp32_affine(const __nv_bfloat16* x, const float* gamma, const float* beta, __nv_bfloat16* y,
                                 int rows, int cols, float eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const dim3 grid(rows);
  const dim3 block(layer_norm::kThreads);
  layer_norm::layer_norm_welford_warp_reduce_kernel<<<grid, block, 0, stream>>>(x, gamma, beta, y, rows, cols, eps);
}
