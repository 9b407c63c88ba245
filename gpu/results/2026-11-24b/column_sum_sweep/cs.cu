#include <cooperative_groups.h>
#if CLUSTER > 1
#define CDIMS __cluster_dims__(1, CLUSTER, 1)
#else
#define CDIMS
#endif
constexpr int kUnroll = UNROLL;
extern "C" __global__ void CDIMS cs(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  const bool live = c0 < cols;
  float acc[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) acc[j] = 0.f;
  if (live) {
#pragma unroll kUnroll
    for (int r = blockIdx.y * SPLIT + threadIdx.y; r < rows; r += SPLIT * CLUSTER) {
#if VEC == 4
      const float4 v = *reinterpret_cast<const float4*>(x + (long long)r * cols + c0);
      acc[0] += v.x; acc[1] += v.y; acc[2] += v.z; acc[3] += v.w;
#elif VEC == 2
      const float2 v = *reinterpret_cast<const float2*>(x + (long long)r * cols + c0);
      acc[0] += v.x; acc[1] += v.y;
#else
      acc[0] += x[(long long)r * cols + c0];
#endif
    }
  }
  __shared__ float part[SPLIT * BLOCK * VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) part[(threadIdx.y * blockDim.x + threadIdx.x) * VEC + j] = acc[j];
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int s = 1; s < SPLIT; ++s)
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] += part[(s * blockDim.x + threadIdx.x) * VEC + j];
#pragma unroll
    for (int j = 0; j < VEC; ++j) part[threadIdx.x * VEC + j] = acc[j];
  }
#if CLUSTER > 1
  cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
  cl.sync();
  if (threadIdx.y == 0 && cl.block_rank() == 0)
    for (unsigned b = 1; b < CLUSTER; ++b)
#pragma unroll
      for (int j = 0; j < VEC; ++j) acc[j] += cl.map_shared_rank(part, b)[threadIdx.x * VEC + j];
  cl.sync();
#endif
  if (threadIdx.y != 0 || blockIdx.y != 0 || !live) return;
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[c0 + j] = acc[j];
}
