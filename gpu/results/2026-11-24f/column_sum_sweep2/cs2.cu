// Column sum sweep 2 (hand-written, outside kerntune): the cluster split of the 2026-11-24b sweep with the
// loads of UNROLL rows issued before they are added (more bytes in flight per thread) and, LOAD=1, the
// non-coherent load with an L2 256-byte prefetch hint (ld.global.nc.L1::no_allocate.L2::256B).
#include <cooperative_groups.h>
#if CLUSTER > 1
#define CDIMS __cluster_dims__(1, CLUSTER, 1)
#else
#define CDIMS
#endif
__device__ __forceinline__ float4 load4(const float* p) {
#if LOAD == 1
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
  return v;
#else
  return *reinterpret_cast<const float4*>(p);
#endif
}
extern "C" __global__ void CDIMS __launch_bounds__(BLOCK * SPLIT) cs(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
  const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  const bool live = c0 < cols;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const int step = SPLIT * CLUSTER;
  int r = blockIdx.y * SPLIT + threadIdx.y;
  if (live) {
    for (; r + (UNROLL - 1) * step < rows; r += UNROLL * step) {
      float4 v[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) v[u] = load4(x + (long long)(r + u * step) * cols + c0);
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) { acc.x += v[u].x; acc.y += v[u].y; acc.z += v[u].z; acc.w += v[u].w; }
    }
    for (; r < rows; r += step) {
      float4 v = load4(x + (long long)r * cols + c0);
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
  }
  __shared__ float4 part[SPLIT * BLOCK];
  part[threadIdx.y * BLOCK + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int s = 1; s < SPLIT; ++s) {
      float4 p = part[s * BLOCK + threadIdx.x];
      acc.x += p.x; acc.y += p.y; acc.z += p.z; acc.w += p.w;
    }
    part[threadIdx.x] = acc;
  }
#if CLUSTER > 1
  cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
  cl.sync();
  if (threadIdx.y == 0 && cl.block_rank() == 0)
    for (unsigned b = 1; b < CLUSTER; ++b) {
      float4 p = cl.map_shared_rank(part, b)[threadIdx.x];
      acc.x += p.x; acc.y += p.y; acc.z += p.z; acc.w += p.w;
    }
  cl.sync();
#endif
  if (threadIdx.y != 0 || blockIdx.y != 0 || !live) return;
  *reinterpret_cast<float4*>(out + c0) = acc;
}
