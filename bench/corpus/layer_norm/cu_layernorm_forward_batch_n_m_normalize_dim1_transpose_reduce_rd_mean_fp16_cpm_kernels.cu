// LayerNorm forward as OpenBMB's cpm_kernels writes it (cuda/layernorm.cu, cu_layernorm_forward behind
// cpm_kernels.kernels.layernorm_forward; the kernels of BMInf and of the CPM-1 / CPM-2 / CPM-Ant inference code),
// fp16, with rd_mean = true (LayerNorm; rd_mean = false is the T5-style RMSNorm of the same kernel):
//   hidden states are kept [batch, dim_model, seq_len] = mat (batch, n, m): the norm runs over the MIDDLE axis n
//   (stride m), one column (b, :, j) per normalized vector; no gamma / beta (the weight is a separate inplace_mul)
//   block (32, 32): threadIdx.x picks the column j = blockIdx.y * 32 + threadIdx.x, threadIdx.y strides n by 32;
//   grid (batch, round_up(m, 32) / 32)
//   one pass summing v and v * v in float (__ldg of the half), E[x^2] - mean^2, each sum reduced over threadIdx.y by
//   transposeReduceSum: a static __shared__ float[32][33] transpose, a __shfl_down warp sum, the column's total
//   broadcast back through the extra column
//   out = half((x - mean) * rsqrtf(var + eps)), x re-read from global memory, one rounding
// The kernel is exported by CPM_KERNEL_EXPORT (extern "C" __global__); kerntune's parser does not read a kernel
// declared through that macro, so the expansion is written out at the kernel. It is launched from Python through
// cuLaunchKernel with gridDim = (batch, round_up(m, 32) // 32, 1), blockDim = (32, 32, 1), no shared memory; that
// launch is written here as a C++ function of the same name and arguments. bool rd_mean is a kernel argument.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

// cpm_kernels/cuda/includes/common.h (the kernel below spells out its expansion, see the header comment)
#define CPM_KERNEL_EXPORT extern "C" __global__

const int WARP_SZ = 32;

namespace {

__inline__ __device__ float warpReduceSum(float v) {
  for (int delta = warpSize / 2; delta > 0; delta /= 2) v += __shfl_down_sync(0xFFFFFFFF, v, delta);
  return v;
}

// sum over threadIdx.y of a (32, 32) block, handed back to every thread of column threadIdx.x: the block's values
// are transposed through shared memory so that warp y sums column y, whose total goes to the padding column
__inline__ __device__ float transposeReduceSum(float v) {
  static __shared__ float tile[WARP_SZ][WARP_SZ + 1];
  tile[threadIdx.x][threadIdx.y] = v;
  __syncthreads();
  v = warpReduceSum(tile[threadIdx.y][threadIdx.x]);
  if (threadIdx.x == 0) tile[threadIdx.y][WARP_SZ] = v;
  __syncthreads();
  return tile[threadIdx.x][WARP_SZ];
}

}  // namespace

// grid <batch, m / 32>   block <32, 32>
/* kerntune:
args  = ["batch: i32 = batch", "n: i32 = n", "m: i32 = m", "mat: in f16[batch * n * m]", "out: out f16[batch * n * m]",
         "eps: f32 = 1e-5", "rd_mean: u8 = 1"]
sizes = [{ batch = 16, n = 4096, m = 512 }, { batch = 4, n = 4096, m = 1 }, { batch = 3, n = 2561, m = 333 }]
grid  = ["batch", "cdiv(m, 32)"]
block = [32, 32]
*/
extern "C" __global__ void cu_layernorm_forward(int32_t batch, int32_t n, int32_t m,
                                                const half* mat,  // (batch, n, m)
                                                half* out,        // (batch, n, m)
                                                float eps, bool rd_mean) {
  int32_t col = blockIdx.y * WARP_SZ + threadIdx.x;
  int32_t offset = (blockIdx.x * n + threadIdx.y) * m + col;  // element (b, threadIdx.y, col)

  float sum_x = 0.0;
  float sum_x2 = 0.0;
  for (int r = 0; r < n; r += WARP_SZ) {
    float x = 0;
    if (col < m && r + threadIdx.y < n) x = (float)__ldg(mat + offset + r * m);
    if (rd_mean) sum_x += x;
    sum_x2 += x * x;
  }

  float var = transposeReduceSum(sum_x2) / (float)n;  // E[x^2]
  float mean = 0.0;
  if (rd_mean) {
    mean = transposeReduceSum(sum_x) / (float)n;
    var -= mean * mean;
  }
  const float rstd = rsqrtf(var + eps);

  if (rd_mean) {
    for (int r = 0; r < n; r += WARP_SZ) {
      if (col < m && r + threadIdx.y < n)
        out[offset + r * m] = __float2half(((float)__ldg(mat + offset + r * m) - mean) * rstd);
    }
  } else {
    for (int r = 0; r < n; r += blockDim.y) {
      if (col < m && r + threadIdx.y < n) out[offset + r * m] = __float2half((float)__ldg(mat + offset + r * m) * rstd);
    }
  }
}

static inline int round_up(int x, int d) { return (x + d - 1) / d * d; }

// mat, out: (batch, n, m) fp16 device pointers; normalizes every (b, :, j) over n.
void layernorm_forward(int batch, int n, int m, const half* mat, half* out, float eps, bool rd_mean,
                       cudaStream_t stream) {
  dim3 gridDim(batch, round_up(m, 32) / 32, 1);
  dim3 blockDim(32, 32, 1);
  cu_layernorm_forward<<<gridDim, blockDim, 0, stream>>>(batch, n, m, mat, out, eps, rd_mean);
}
