// Rotary embedding with the flash-attn apply_rotary_emb contract, as a CUDA port of its tiled kernel: x is batched,
// not flattened, [batch, seqlen, nheads, headdim] fp16, and the position of token s of sequence b is
// seqlen_offsets[b] + s (int32 [batch], each sequence's offset into its KV cache during decoding); cos and sin are
// two fp16 tables [seqlen_ro, rotary_dim / 2] (one entry per pair, the dtype of x); positions at or past seqlen_ro
// get cos = 1, sin = 0 (the tile loads are masked with those fill values). NeoX pairing (non-interleaved: i with
// i + rotary_dim / 2), partial rotary allowed (rotary_dim <= headdim): out of place, the channels past rotary_dim
// copied through to out. fp32 math, one rounding per output.
// Launch as the tiled kernel's program grid: grid (ceil(seqlen / BLOCK_M), batch, nheads), one block per tile of
// BLOCK_M positions of one (sequence, head); block (32, BLOCK_M), threadIdx.y the position in the tile and
// threadIdx.x striding over the pairs, then over the copied channels. BLOCK_M is a template parameter, 8 for
// rotary_dim <= 128 and 4 above (spec = <8>).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["out: out f16[batch * seqlen * nheads * headdim]", "x: in f16[batch * seqlen * nheads * headdim]",
         "cos: in f16[seqlen_ro * rotary_dim / 2] ~ uniform(-1, 1)",
         "sin: in f16[seqlen_ro * rotary_dim / 2] ~ uniform(-1, 1)",
         "seqlen_offsets: in i32[batch] ~ randint(0, seqlen_ro - seqlen + 1)",
         "seqlen: i32 = seqlen", "nheads: i32 = nheads", "headdim: i32 = headdim", "rotary_dim: i32 = rotary_dim",
         "seqlen_ro: i32 = seqlen_ro"]
sizes = [{ batch = 4, seqlen = 2048, nheads = 32, headdim = 128, rotary_dim = 128, seqlen_ro = 4096 },
         { batch = 16, seqlen = 1, nheads = 32, headdim = 128, rotary_dim = 128, seqlen_ro = 4096 },
         { batch = 3, seqlen = 301, nheads = 5, headdim = 80, rotary_dim = 32, seqlen_ro = 4096 }]
grid  = ["cdiv(seqlen, 8)", "batch", "nheads"]
block = [32, 8]
template_args = ["8"]
*/
template <int BLOCK_M>
__global__ void rotary_kernel(__half* __restrict__ out, const __half* __restrict__ x, const __half* __restrict__ cos,
                              const __half* __restrict__ sin, const int* __restrict__ seqlen_offsets,
                              const int seqlen, const int nheads, const int headdim, const int rotary_dim,
                              const int seqlen_ro) {
  const int pid_m = blockIdx.x;
  const int pid_batch = blockIdx.y;
  const int pid_head = blockIdx.z;
  const int m = pid_m * BLOCK_M + threadIdx.y;
  if (m >= seqlen) return;

  const int rotary_dim_half = rotary_dim / 2;
  const int pos = m + seqlen_offsets[pid_batch];
  const int64_t row = ((static_cast<int64_t>(pid_batch) * seqlen + m) * nheads + pid_head) * headdim;
  const __half* x_row = x + row;
  __half* out_row = out + row;

  for (int k = threadIdx.x; k < rotary_dim_half; k += blockDim.x) {
    float c = 1.0f, s = 0.0f;
    if (pos < seqlen_ro) {
      c = __half2float(cos[static_cast<int64_t>(pos) * rotary_dim_half + k]);
      s = __half2float(sin[static_cast<int64_t>(pos) * rotary_dim_half + k]);
    }
    const float x0 = __half2float(x_row[k]);
    const float x1 = __half2float(x_row[k + rotary_dim_half]);
    out_row[k] = __float2half(x0 * c - x1 * s);
    out_row[k + rotary_dim_half] = __float2half(x0 * s + x1 * c);
  }
  for (int k = rotary_dim + threadIdx.x; k < headdim; k += blockDim.x) {
    out_row[k] = x_row[k];
  }
}

// out, x: [batch, seqlen, nheads, headdim] fp16; cos, sin: [seqlen_ro, rotary_dim / 2] fp16; seqlen_offsets:
// [batch] int32. Device pointers; rotary_dim even and at most headdim.
void apply_rotary(__half* out, const __half* x, const __half* cos, const __half* sin, const int* seqlen_offsets,
                  int batch, int seqlen, int nheads, int headdim, int rotary_dim, int seqlen_ro, cudaStream_t stream) {
  if (batch == 0 || seqlen == 0) return;
  if (rotary_dim <= 128) {
    constexpr int BLOCK_M = 8;
    const dim3 grid((seqlen + BLOCK_M - 1) / BLOCK_M, batch, nheads);
    rotary_kernel<BLOCK_M><<<grid, dim3(32, BLOCK_M), 0, stream>>>(out, x, cos, sin, seqlen_offsets, seqlen, nheads,
                                                                   headdim, rotary_dim, seqlen_ro);
  } else {
    constexpr int BLOCK_M = 4;
    const dim3 grid((seqlen + BLOCK_M - 1) / BLOCK_M, batch, nheads);
    rotary_kernel<BLOCK_M><<<grid, dim3(32, BLOCK_M), 0, stream>>>(out, x, cos, sin, seqlen_offsets, seqlen, nheads,
                                                                   headdim, rotary_dim, seqlen_ro);
  }
}
