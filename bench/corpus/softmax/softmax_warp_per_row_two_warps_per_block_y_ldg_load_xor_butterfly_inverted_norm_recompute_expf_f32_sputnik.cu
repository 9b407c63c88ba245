// Dense row softmax in the style of Google Research's Sputnik (google-research/sputnik,
// sputnik/softmax/softmax.cu.cc: SoftmaxKernel behind sputnik::Softmax, the dense twin of SparseSoftmax used on the
// attention scores of sparse transformers), fp32:
//   input, output [m, n] row-major, out of place; argument order m, n, input, output (sizes first)
//   ONE WARP PER ROW, two warps per block on threadIdx.y: block (kBlockWidth = 32, kWarpsPerBlock = 2), grid
//   ceil(m / 2) computed on the host with std::ceil of a float quotient; m_index = blockIdx.x * blockDim.y +
//   threadIdx.y, warps past m return
//   three passes over the row in global memory: the max (-infinity seed, ternary compare) reduced with a full-mask
//   __shfl_xor_sync butterfly over blockDim.x lanes; the sum of expf(x - max) reduced the same way and inverted
//   once (norm = 1 / sum); the exponentials recomputed with expf and multiplied by norm at the store
//   loads through a Load() helper (__ldg), stores through Store() (sputnik/load_store.h, written here as our
//   own two-line helpers); int indices (m_index * n); cudaError_t returned from cudaGetLastError()
// No bug found (the row offset m_index * n stays below 2^31 for the sizes used here). Sputnik builds with
// --expt-relaxed-constexpr for its std::numeric_limits<float>::infinity() seed; the seed here is -INFINITY.
// Tolerance: probabilities over hundreds of columns are far below the default absolute tolerance; atol 1e-6.
#include <cuda_runtime.h>

#include <cmath>

namespace sputnik {

__device__ __forceinline__ float Load(const float* address) { return __ldg(address); }

__device__ __forceinline__ void Store(float value, float* address) { *address = value; }

namespace {

/* kerntune:
args  = ["m: i32 = m", "n: i32 = n", "input: in f32[m * n]", "output: out f32[m * n]"]
sizes = [{ m = 65536, n = 512 }, { m = 32, n = 1024 }, { m = 1001, n = 333 }]
grid  = "cdiv(m, 2)"
block = [32, 2]
atol  = 1e-6
*/
__global__ void SoftmaxKernel(int m, int n, const float* __restrict__ input,
                              float* __restrict__ output) {
  // The row this warp of the block handles.
  const int m_index = blockIdx.x * blockDim.y + threadIdx.y;
  if (m_index >= m) return;

  // Pass 1: the row maximum.
  const float* in = input + m_index * n;
  float row_max = -INFINITY;  // std::numeric_limits<float>::infinity() needs --expt-relaxed-constexpr
  for (int col = threadIdx.x; col < n; col += blockDim.x) {
    const float x = Load(in + col);
    row_max = x > row_max ? x : row_max;
  }
  for (int lane_mask = 1; lane_mask < blockDim.x; lane_mask *= 2) {
    const float x = __shfl_xor_sync(0xffffffff, row_max, lane_mask);
    row_max = x > row_max ? x : row_max;
  }

  // Pass 2: the normalizer, inverted once.
  float sum = 0.0f;
  for (int col = threadIdx.x; col < n; col += blockDim.x) {
    sum += expf(Load(in + col) - row_max);
  }
  for (int lane_mask = 1; lane_mask < blockDim.x; lane_mask *= 2) {
    sum += __shfl_xor_sync(0xffffffff, sum, lane_mask);
  }
  const float norm = 1.0f / sum;

  // Pass 3: recompute the exponentials and scale them.
  float* out = output + m_index * n;
  for (int col = threadIdx.x; col < n; col += blockDim.x) {
    Store(expf(Load(in + col) - row_max) * norm, out + col);
  }
}

}  // namespace

// input, output: device [m, n] fp32.
cudaError_t Softmax(int m, int n, const float* __restrict__ input,
                    float* __restrict__ output, cudaStream_t stream) {
  // One warp per row; two rows per block to keep occupancy up.
  constexpr int kBlockWidth = 32;
  constexpr int kWarpsPerBlock = 2;
  dim3 grid_dim(std::ceil(static_cast<float>(m) / kWarpsPerBlock));
  dim3 block_dim(kBlockWidth, kWarpsPerBlock);

  SoftmaxKernel<<<grid_dim, block_dim, 0, stream>>>(m, n, input, output);
  return cudaGetLastError();
}

}  // namespace sputnik
