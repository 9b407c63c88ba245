// Merging split-K attention partials as xFormers' fmha merge_attentions does it, in CUDA: the split dimension
// OUTERMOST and the lse with the query position innermost: attn_split fp32 [num_splits, B, M, H, K], lse_split
// fp32 [num_splits, B, H, M] (natural log), merged into attn_out bf16 [B, M, H, K] and lse_out fp32 [B, H, M].
// Per (b, m, h): lse_max = max over splits, w_i = expf(lse_i - lse_max), out = sum(w_i * attn_i) / sum(w_i)
// in fp32 with one bf16 rounding at the store, lse_out = lse_max + logf(sum(w_i)) written by thread 0. Two loops
// over the splits (max, then the weighted sum). Launch: grid (B * H, M) as the Triton reduce kernel's program
// grid, a block of K / 4 threads, each thread one float4 of channels of every split.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["attn_out: out bf16[B * M * H * K]", "lse_out: out f32[B * H * M]",
         "attn_split: in f32[num_splits * B * M * H * K]",
         "lse_split: in f32[num_splits * B * H * M] ~ uniform(-4, 12)", "num_splits: i32 = num_splits",
         "B: i32 = B", "M: i32 = M", "H: i32 = H", "K: i32 = K"]
sizes = [{ num_splits = 4, B = 4, M = 1024, H = 32, K = 128 }, { num_splits = 16, B = 8, M = 1, H = 32, K = 128 },
         { num_splits = 3, B = 3, M = 37, H = 7, K = 96 }]
grid  = ["B * H", "M"]
block = "K / 4"
*/
__global__ void merge_attentions_kernel(__nv_bfloat16* __restrict__ attn_out, float* __restrict__ lse_out,
                                        const float* __restrict__ attn_split, const float* __restrict__ lse_split,
                                        const int num_splits, const int B, const int M, const int H, const int K) {
  const int b = blockIdx.x / H;
  const int h = blockIdx.x % H;
  const int m = blockIdx.y;
  const int k = threadIdx.x * 4;

  const int64_t lse_split_stride = static_cast<int64_t>(B) * H * M;
  const int64_t attn_split_stride = static_cast<int64_t>(B) * M * H * K;
  const int64_t lse_idx = (static_cast<int64_t>(b) * H + h) * M + m;
  const int64_t attn_idx = ((static_cast<int64_t>(b) * M + m) * H + h) * K + k;

  float lse_max = -INFINITY;
  for (int s = 0; s < num_splits; ++s) {
    lse_max = fmaxf(lse_max, lse_split[s * lse_split_stride + lse_idx]);
  }

  float sumexp = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < num_splits; ++s) {
    const float w = expf(lse_split[s * lse_split_stride + lse_idx] - lse_max);
    const float4 v = *reinterpret_cast<const float4*>(attn_split + s * attn_split_stride + attn_idx);
    sumexp += w;
    acc.x += w * v.x;
    acc.y += w * v.y;
    acc.z += w * v.z;
    acc.w += w * v.w;
  }

  const float inv = 1.f / sumexp;
  __nv_bfloat16* out = attn_out + attn_idx;
  out[0] = __float2bfloat16(acc.x * inv);
  out[1] = __float2bfloat16(acc.y * inv);
  out[2] = __float2bfloat16(acc.z * inv);
  out[3] = __float2bfloat16(acc.w * inv);
  if (threadIdx.x == 0) lse_out[lse_idx] = lse_max + logf(sumexp);
}

// Host side (merge_attentions(attn_out, lse_out, attn_split, lse_split) for contiguous tensors). Device pointers;
// K a multiple of 4.
void merge_attentions(__nv_bfloat16* attn_out, float* lse_out, const float* attn_split, const float* lse_split,
                      int num_splits, int B, int M, int H, int K, cudaStream_t stream) {
  const dim3 grid(B * H, M);
  const dim3 block(K / 4);
  merge_attentions_kernel<<<grid, block, 0, stream>>>(attn_out, lse_out, attn_split, lse_split, num_splits, B, M, H,
                                                      K);
}
