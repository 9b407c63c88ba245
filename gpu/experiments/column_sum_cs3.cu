// Column sum sweep 3 (hand-written, outside kerntune): sweep 2 with the load instruction as LOAD (below).
// Sweep 2: the cluster split of the 2026-11-24b sweep with the
// loads of UNROLL rows issued before they are added (more bytes in flight per thread) and, LOAD=1, the
// non-coherent load with an L2 256-byte prefetch hint (ld.global.nc.L1::no_allocate.L2::256B).
#include <cooperative_groups.h>
#if CLUSTER > 1
#define CDIMS __cluster_dims__(1, CLUSTER, 1)
#else
#define CDIMS
#endif
// LOAD: 0 plain; 1 ld.global.nc.L1::no_allocate.L2::256B; 2 ld.global.L1::no_allocate.L2::256B (coherent);
// 3 ld.global.nc.L2::256B; 4 ld.global.L2::256B; 5 ld.global.nc.L1::no_allocate; 6 ld.global.nc; 7 ld.global.cs;
// 8 ld.global.nc.L1::no_allocate.L2::128B
#define LD(q) asm volatile(q " {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p))
__device__ __forceinline__ float4 load4(const float* p) {
  float4 v;
#if LOAD == 1
  LD("ld.global.nc.L1::no_allocate.L2::256B.v4.f32");
#elif LOAD == 2
  LD("ld.global.L1::no_allocate.L2::256B.v4.f32");
#elif LOAD == 3
  LD("ld.global.nc.L2::256B.v4.f32");
#elif LOAD == 4
  LD("ld.global.L2::256B.v4.f32");
#elif LOAD == 5
  LD("ld.global.nc.L1::no_allocate.v4.f32");
#elif LOAD == 6
  LD("ld.global.nc.v4.f32");
#elif LOAD == 7
  LD("ld.global.cs.v4.f32");
#elif LOAD == 8
  LD("ld.global.nc.L1::no_allocate.L2::128B.v4.f32");
#else
  v = *reinterpret_cast<const float4*>(p);
#endif
  return v;
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
