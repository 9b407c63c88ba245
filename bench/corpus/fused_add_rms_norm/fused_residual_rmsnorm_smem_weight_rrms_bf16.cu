// Fused residual add + RMSNorm forward as Karpathy's llm.c writes it (llmc/rmsnorm.cuh on the llama3 branch,
// fused_residual_rmsnorm_forward_kernel5, itself a trim of its layernorm kernel6):
//   residual[n, :] = floatX(inp1[n, :] + inp2[n, :])            (out of place: inp1, inp2 are only read)
//   s             = rsqrtf(mean(residual^2) + 1e-5f)            (from the ROUNDED residual; eps a literal)
//   normed[n, :]  = floatX(s * residual * weight)               (fp32 math, one rounding)
//   rrms[n]       = s                                           (fp32, cached for the backward pass)
// Argument order outputs first (residual, normed, rrms, inp1, inp2, weight, N, C). Launch: one warp per row,
// block (WARP_SIZE, block_y) with block_y = 256 / 32 = 8 rows per block, grid CEIL_DIV(N, block_y), dynamic
// shared memory (1 + block_y) * C * sizeof(floatX): the weight row once per block (loaded cooperatively by all
// warps before any warp may leave), then one C-row slot per warp caching its rounded residual, so the sum of
// squares and the normalization read shared memory instead of global; x128 packs (8 bf16, __ldcs / __stcs
// streaming hints), xor-shuffle warpReduceSum, the launcher raising cudaFuncAttributeMaxDynamicSharedMemorySize.
// C must be a multiple of 8.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cassert>
#include <cstring>

typedef __nv_bfloat16 floatX;

#define WARP_SIZE 32U
#define CEIL_DIV(M, N) (((M) + (N)-1) / (N))

// ----------------------------------------------------------------------------
// Packed128 (16 bytes of any element type) and its load / store helpers

template <class ElementType>
struct alignas(16) Packed128 {
  Packed128() = default;
  __device__ explicit Packed128(int4 bits) { memcpy(&payload, &bits, sizeof(bits)); }
  __device__ ElementType& operator[](int index) { return payload[index]; }
  __device__ const ElementType& operator[](int index) const { return payload[index]; }
  __device__ int4 get_bits() const {
    int4 bits;
    memcpy(&bits, &payload, sizeof(bits));
    return bits;
  }
  static constexpr const size_t size = sizeof(int4) / sizeof(ElementType);
  ElementType payload[size];
};

typedef Packed128<floatX> x128;

template <class ElementType>
__device__ Packed128<ElementType> load128(const ElementType* address) {
  return Packed128<ElementType>{*reinterpret_cast<const int4*>(address)};
}
template <class ElementType>
__device__ Packed128<ElementType> load128cs(const ElementType* address) {
  return Packed128<ElementType>{__ldcs(reinterpret_cast<const int4*>(address))};
}
template <class ElementType>
__device__ void store128cs(ElementType* target, Packed128<ElementType> value) {
  __stcs(reinterpret_cast<int4*>(target), value.get_bits());
}

__device__ inline float warpReduceSum(float val) {
  for (int offset = 16; offset > 0; offset /= 2) {
    val += __shfl_xor_sync(0xFFFFFFFF, val, offset);
  }
  return val;
}

// ----------------------------------------------------------------------------
// CUDA kernels

/* kerntune:
args  = ["residual: out bf16[N * C]", "normed: out bf16[N * C]", "rrms: out f32[N]", "inp1: in bf16[N * C]",
         "inp2: in bf16[N * C]", "weight: in bf16[C]", "N: i32 = N", "C: i32 = C"]
sizes = [{ N = 8192, C = 4096 }, { N = 4, C = 8192 }, { N = 1001, C = 2056 }]
grid  = "cdiv(N, 8)"
block = [32, 8]
smem  = "(1 + 8) * C * 2"
*/
__global__ void fused_residual_rmsnorm_forward_kernel5(floatX* residual, floatX* normed, float* rrms,
                                                       const floatX* inp1, const floatX* inp2,
                                                       const floatX* weight, int N, int C) {
  assert(blockDim.x == WARP_SIZE);

  // weights into shared memory first: every warp helps, so no warp may return before the barrier
  extern __shared__ __align__(16) unsigned char params[];
  x128* s_weight = reinterpret_cast<x128*>(params);
  x128* s_res = reinterpret_cast<x128*>(params) + ((1 + threadIdx.y) * C / x128::size);

  int sidx = (threadIdx.x + WARP_SIZE * threadIdx.y) * x128::size;
  for (int i = sidx; i < C; i += blockDim.y * WARP_SIZE * x128::size) {
    s_weight[i / x128::size] = load128(weight + i);
  }
  __syncthreads();

  int idx = blockIdx.x * blockDim.y + threadIdx.y;
  if (idx >= N) return;  // guard: the last block may hold fewer than block_y rows

  // adjust pointers to the current token
  residual += C * idx;
  normed += C * idx;
  inp1 += C * idx;
  inp2 += C * idx;

  const float eps = 1e-5f;
  for (int c = threadIdx.x * x128::size; c < C; c += WARP_SIZE * x128::size) {
    const x128 in1 = load128cs(inp1 + c);
    const x128 in2 = load128cs(inp2 + c);
    x128 out;
    for (int k = 0; k < x128::size; ++k) {
      out[k] = (floatX)((float)in1[k] + (float)in2[k]);
    }
    store128cs(residual + c, out);
    s_res[c / x128::size] = out;  // this lane reads back exactly the packs it wrote
  }

  float v = 0.f;
  for (int c = threadIdx.x * x128::size; c < C; c += WARP_SIZE * x128::size) {
    const x128 res = s_res[c / x128::size];
    for (int k = 0; k < x128::size; ++k) {
      v += (float)res[k] * (float)res[k];
    }
  }

  v = warpReduceSum(v) / C;
  float s = rsqrtf(v + eps);

  for (int c = threadIdx.x * x128::size; c < C; c += WARP_SIZE * x128::size) {
    const x128 res = s_res[c / x128::size];
    const x128 w = s_weight[c / x128::size];
    x128 out;
    for (int k = 0; k < x128::size; ++k) {
      float n = s * (float)res[k];  // normalized output
      float o = n * (float)w[k];    // scale
      out[k] = (floatX)o;
    }
    store128cs(normed + c, out);
  }
  // cache the rrms for the backward pass later
  if (threadIdx.x == 0) {
    rrms[idx] = s;
  }
}

// ----------------------------------------------------------------------------
// kernel launcher

// residual, normed, inp1, inp2 (N, C); weight (C); rrms (N); device pointers, 16-byte aligned, C % 8 == 0.
void fused_residual_rmsnorm_forward5(floatX* residual, floatX* normed, float* rrms, const floatX* inp1,
                                     const floatX* inp2, const floatX* weight, int N, int C, cudaStream_t stream) {
  const int block_size = 256;
  int block_y = block_size / WARP_SIZE;
  const int grid_size = CEIL_DIV(N, block_y);
  size_t smem = (1 + block_y) * C * sizeof(floatX);

  // more than 48 KiB of dynamic shared memory needs the attribute raised first
  auto status = cudaFuncSetAttribute(fused_residual_rmsnorm_forward_kernel5,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  assert(status == cudaSuccess);
  (void)status;
  fused_residual_rmsnorm_forward_kernel5<<<grid_size, dim3(WARP_SIZE, block_y), smem, stream>>>(
      residual, normed, rrms, inp1, inp2, weight, N, C);
}
