// SiLU-and-mul (fp16) done entirely in packed half arithmetic, as hand-optimized fp16 inference kernels write it
// to stay in the half pipe: no upcast to fp32 anywhere. input is [num_tokens, 2 * d] with the gate half first,
// out is [num_tokens, d]; both halves of a row are read as __half2 pairs (d is even, so the up half and every
// row start on a 4-byte boundary) and
//   silu(g) = g * h2rcp(1 + h2exp(-g)),   out = silu(g) * u
// with __hneg2 / __hadd2 / __hmul2, every intermediate (exp, 1 + exp, its reciprocal, silu, the product) rounded
// to fp16. One token per block, 256 threads striding over the d / 2 pairs of the row.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cassert>
#include <cstdint>

#define SILU_MUL_THREADS 256

__device__ __forceinline__ __half2 silu_h2(const __half2 g) {
  const __half2 one = __float2half2_rn(1.0f);
  const __half2 e = h2exp(__hneg2(g));       // exp(-g); overflows to inf below g ~ -11.1, giving silu = -0
  return __hmul2(g, h2rcp(__hadd2(one, e)));  // g * sigmoid(g)
}

// The default fp16 tolerance (rtol 1e-2, atol 1e-2) is kept on purpose: each of the five fp16 steps (h2exp and
// h2rcp are an fp32 approximation rounded once to fp16, the add and the two multiplies round to nearest) adds at
// most about half an fp16 ulp, 2^-11 relative, and none of them cancels (1 + exp(-g) adds two positives), so the
// result stays within about 3e-3 relative of the fp32 value; where exp(-g) overflows the true value is below
// 2e-4 in magnitude (times |u|), inside atol. A rewrite that computes in fp32 therefore still matches.
/* kerntune:
args  = ["out: out f16[num_tokens * d]", "input: in f16[num_tokens * 2 * d]", "d: i32 = d"]
sizes = [{ num_tokens = 2048, d = 14336 }, { num_tokens = 8, d = 11008 }, { num_tokens = 1001, d = 5462 }]
grid  = "num_tokens"
block = 256
*/
__global__ void silu_and_mul_half2_kernel(__half* __restrict__ out,          // [num_tokens, d]
                                          const __half* __restrict__ input,  // [num_tokens, 2, d]: gate, up
                                          const int d) {
  const int64_t token = blockIdx.x;
  const int d2 = d >> 1;  // pairs in each half of the row
  const __half2* gate = reinterpret_cast<const __half2*>(input + token * 2 * d);
  const __half2* up = gate + d2;
  __half2* out2 = reinterpret_cast<__half2*>(out + token * d);
  for (int i = threadIdx.x; i < d2; i += blockDim.x) {
    out2[i] = __hmul2(silu_h2(gate[i]), up[i]);
  }
}

// out: [num_tokens, d]; input: [num_tokens, 2 * d] (gate | up), contiguous fp16. d must be even (every MLP
// intermediate size is); the pairs are read as __half2.
void silu_and_mul_half2(__half* out, const __half* input, int64_t num_tokens, int d, cudaStream_t stream) {
  assert(d % 2 == 0 && "silu_and_mul_half2 reads the row as __half2 pairs");
  if (num_tokens == 0 || d == 0) return;
  const dim3 grid(static_cast<unsigned>(num_tokens));
  const dim3 block(SILU_MUL_THREADS);
  silu_and_mul_half2_kernel<<<grid, block, 0, stream>>>(out, input, d);
}
