// SiLU-gated product written back over the up projection (up = silu(gate) * up, in place), bf16 seen as uint4 words
// of eight values (16-byte loads and stores), fp32 math and one rounding a value; a grid-stride loop over the words of
// the whole tensor, n the element count (a multiple of 8).
#include <cuda_bf16.h>

/* kerntune:
args  = ["gate: in bf16[n]", "up: inout bf16[n]", "n: i64 = n"]
sizes = [{ n = 33554432 }, { n = 8008 }]
grid  = "min(cdiv(n / 8, 256), 1024)"
block = 256
*/
__global__ void silu_into_up(const uint4* __restrict__ gate, uint4* __restrict__ up, long long n) {
  const long long words = n / 8;
  for (long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x; w < words; w += (long long)gridDim.x * blockDim.x) {
    uint4 g4 = gate[w], u4 = up[w];
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&g4);
    __nv_bfloat162* u2 = reinterpret_cast<__nv_bfloat162*>(&u4);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 g = __bfloat1622float2(g2[j]);
      const float2 u = __bfloat1622float2(u2[j]);
      u2[j] = __floats2bfloat162_rn(g.x / (1.0f + expf(-g.x)) * u.x, g.y / (1.0f + expf(-g.y)) * u.y);
    }
    up[w] = u4;
  }
}

void silu_into_up_launch(const __nv_bfloat16* gate, __nv_bfloat16* up, long long n, cudaStream_t stream) {
  const long long words = n / 8;
  const int blocks = (int)std::min<long long>((words + 255) / 256, 1024);
  silu_into_up<<<blocks, 256, 0, stream>>>(reinterpret_cast<const uint4*>(gate), reinterpret_cast<uint4*>(up), n);
}
