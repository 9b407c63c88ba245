// Split-KV combine in the layout of FlashAttention's split kernels: the partial outputs fp32 out_accum
// [num_splits, batch, seqlen, nheads, headdim] beside their log-sum-exps lse_accum [num_splits, batch, nheads,
// seqlen] (softmax_lse's [b, h, s] order, not the output's [b, s, h]); merged into an fp16 output [batch, seqlen,
// nheads, headdim] and the merged lse [batch, nheads, seqlen]. Two passes over the splits' lse as FlashAttention's
// combine does (the max, then the weights e^(lse - max) over their sum); one warp a (batch, position, head) row, a
// lane two channels at a time; sizes in the order (batch, seqlen, nheads, headdim) and the split count last.
#include <cuda_fp16.h>
#include <cmath>

/* kerntune:
args  = ["out: out f16[b * s * h * d]", "softmax_lse: out f32[b * h * s]",
         "out_accum: in f32[n * b * s * h * d]", "lse_accum: in f32[n * b * h * s] ~ uniform(-4, 12)",
         "batch: i32 = b", "seqlen: i32 = s", "nheads: i32 = h", "headdim: i32 = d", "num_splits: i32 = n"]
sizes = [{ b = 2, s = 512, h = 16, d = 128, n = 4 }, { b = 4, s = 1, h = 8, d = 64, n = 8 },
         { b = 3, s = 33, h = 5, d = 96, n = 3 }]
grid  = "cdiv(b * s * h, 8)"
block = 256
*/
__global__ void flash_combine_splits(half* __restrict__ out, float* __restrict__ softmax_lse,
                                     const float* __restrict__ out_accum, const float* __restrict__ lse_accum,
                                     int batch, int seqlen, int nheads, int headdim, int num_splits) {
  const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= batch * seqlen * nheads) return;
  const int hi = warp % nheads;                // the row [bi, si, hi] of the output
  const int si = (warp / nheads) % seqlen;
  const int bi = warp / (nheads * seqlen);
  const long long split_rows = (long long)batch * seqlen * nheads;
  const long long lse_row = ((long long)bi * nheads + hi) * seqlen + si;
  float lse_max = -INFINITY;
  for (int sp = 0; sp < num_splits; ++sp) lse_max = fmaxf(lse_max, lse_accum[sp * split_rows + lse_row]);
  float sum = 0.f;
  for (int sp = 0; sp < num_splits; ++sp) sum += expf(lse_accum[sp * split_rows + lse_row] - lse_max);
  const float inv = 1.f / sum;
  for (int c = lane * 2; c < headdim; c += 64) {
    float acc0 = 0.f, acc1 = 0.f;
    for (int sp = 0; sp < num_splits; ++sp) {
      const float w = expf(lse_accum[sp * split_rows + lse_row] - lse_max) * inv;
      const float* o = out_accum + (sp * split_rows + warp) * headdim + c;
      acc0 += w * o[0];
      acc1 += w * o[1];
    }
    out[(long long)warp * headdim + c] = __float2half(acc0);
    out[(long long)warp * headdim + c + 1] = __float2half(acc1);
  }
  if (lane == 0) softmax_lse[lse_row] = lse_max + logf(sum);
}

void flash_combine(half* out, float* softmax_lse, const float* out_accum, const float* lse_accum, int batch,
                   int seqlen, int nheads, int headdim, int num_splits, cudaStream_t stream) {
  const int rows = batch * seqlen * nheads;
  flash_combine_splits<<<(rows + 7) / 8, 256, 0, stream>>>(out, softmax_lse, out_accum, lse_accum, batch, seqlen,
                                                           nheads, headdim, num_splits);
}
