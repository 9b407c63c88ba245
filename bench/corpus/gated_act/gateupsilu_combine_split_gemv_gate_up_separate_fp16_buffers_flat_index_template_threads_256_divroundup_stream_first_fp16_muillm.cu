// SwiGLU combine as muiLLM writes it (Epliz/muiLLM, csrc/ffn/gateup_fp16_kernels.cu,
// muillm_gateupsilu_combine_fp16_kernel launched at the end of muillm_gateupsilu_split_forward_fp16). muiLLM's
// gate/up MLP is a GEMV; on its split-K path the gate and up projections are written as two separate fp16 buffers
// gy and uy (already reduced and rounded to fp16), and this kernel forms y = silu(gy) * uy. fp16 storage, fp32 math:
// silu(x) = x / (1 + expf(-x)) on the widened gate, times the widened up value, one __float2half rounding. Flat
// index blockIdx.x * THREADS_PER_BLOCK + threadIdx.x with a bounds check, THREADS_PER_BLOCK a template parameter
// dispatched by a host if / else chain (64 / 128 / 256, a launch macro here; the occupancy loop that would raise it is commented out
// upstream, so 256 = GEMV_THREADS_PER_BLOCK is what runs), grid DIV_ROUND_UP(N, threads), the stream first in the
// host signature (hipStream_t upstream: muiLLM targets AMD Instinct GPUs through HIP). Argument order (GY, UY, Y, N)
// with an unsigned N.
// Changed: HIP types spelled as CUDA (hipStream_t -> cudaStream_t, hip_fp16.h -> cuda_fp16.h); the GEMV part of the
// split path is left out and the combine launched on its own; muiLLM runs it on one token's N = intermediate rows,
// here N covers a batch of tokens laid out [tokens, inter] (the kernel is elementwise, so only N changes); the
// unused warpCounts / warpId / laneId locals of the original are dropped. No bug found. Sizes: 4096 x 14336,
// decode 4 x 14336, 999 x 3001 (N odd, the last block partly idle).
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define GEMV_THREADS_PER_BLOCK 256

#define DIV_ROUND_UP(a, b) (((a) + (b) - 1) / (b))

static inline float __device__ silu(float x) {
  return x / (1.0f + expf(-x));
}

/* kerntune:
args  = ["GY: in f16[tokens * inter]", "UY: in f16[tokens * inter]", "Y: out f16[tokens * inter]",
         "N: u32 = tokens * inter"]
sizes = [{ tokens = 4096, inter = 14336 }, { tokens = 4, inter = 14336 }, { tokens = 999, inter = 3001 }]
grid  = "cdiv(tokens * inter, 256)"
block = 256
template_args = ["256"]
*/
template<int THREADS_PER_BLOCK>
__global__ void muillm_gateupsilu_combine_fp16_kernel(
    const half* __restrict__ GY, // gate projection, N values
    const half* __restrict__ UY, // up projection, N values
    half* __restrict__ Y, // silu(gate) * up, N values
    unsigned N
) {
  unsigned i = blockIdx.x * THREADS_PER_BLOCK + threadIdx.x;
  if (i >= N) {
    return;
  }

  float gate = __half2float(GY[i]);
  float up = __half2float(UY[i]);
  Y[i] = __float2half(silu(gate) * up);
}

#define LAUNCH_GATEUPSILU_COMBINE(threads) \
  muillm_gateupsilu_combine_fp16_kernel<threads><<<num_blocks, threads_per_block, 0, stream>>>(gy, uy, y, N)

void muillm_gateupsilu_combine_fp16(
  cudaStream_t stream,
  unsigned N,
  const half* gy,
  const half* uy,
  half* y
) {
  const int threads_per_block = GEMV_THREADS_PER_BLOCK;
  const int num_blocks = DIV_ROUND_UP(N, threads_per_block);

  if (threads_per_block == 64) {
    LAUNCH_GATEUPSILU_COMBINE(64);
  } else if (threads_per_block == 128) {
    LAUNCH_GATEUPSILU_COMBINE(128);
  } else {
    LAUNCH_GATEUPSILU_COMBINE(256);
  }
}
