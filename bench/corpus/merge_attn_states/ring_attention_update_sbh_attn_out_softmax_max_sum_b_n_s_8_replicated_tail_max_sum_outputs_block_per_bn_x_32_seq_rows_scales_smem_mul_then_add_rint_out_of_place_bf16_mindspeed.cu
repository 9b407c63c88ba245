// Ring-attention state update in the style of MindSpeed (Ascend/MindSpeed, mindspeed/ops/npu_ring_attention_update.py
// npu_ring_attention_update -> mindspeed/ops/csrc/cann/npu_ring_attention_update.cpp -> aclnnRingAttentionUpdate, the
// CANN kernel KernelRingAttentionUpdate<T> of ops-transformer attention/ring_attention_update (ring_attention_update.h);
// MindSpeed is Huawei's LLM training acceleration library for Ascend NPUs, this op merging two FlashAttention passes
// of context-parallel ring attention), ported from AscendC to CUDA:
//   attention outputs in SBH layout, prev_attn_out / cur_attn_out / attn_out [S, B, H] with H = N * D (bf16 here),
//   so the (b, n) head of token s is the D values at s * (B * N * D) + (b * N + n) * D;
//   softmax statistics as FlashAttention on Ascend returns them: softmax_max and softmax_sum [B, N, S, 8] fp32, a
//   (max, sum-of-exp) PAIR per row, each value REPLICATED 8 times (one 32-byte block: the NPU's vector unit works on
//   32-byte blocks), not a log-sum-exp;
//   OUT OF PLACE with three outputs: attn_out, softmax_max, softmax_sum.
//   Per row, elementwise over the 8-wide tail as the vector ops run (Max, Sub, Exp, Mul, Add, Div, each rounded):
//   max = max(prev_max, cur_max); prev_scaled = prev_sum * exp(prev_max - max); cur_scaled = cur_sum *
//   exp(cur_max - max); sum = prev_scaled + cur_scaled; prev_out_scale = prev_scaled / sum; cur_out_scale likewise;
//   attn_out = prev_attn_out * prev_out_scale + cur_attn_out * cur_out_scale in fp32 (Cast to fp32, Mul, Mul, Add:
//   two rounded products, then a rounded add), cast back with round-to-nearest-even (CAST_RINT for bf16).
//   The output scale of a row is its tail element 0 (the op's documented equivalent, prev_out_scale[..., 0]; the
//   AscendC Mul broadcasts the whole 32-byte tail block, the same thing when the 8 values are equal, as the op
//   requires).
//   Work split as the AscendC kernel loops it: a (b, n) head and a chunk of seqNumLoopEach = 32 sequence rows per
//   step (SoftmaxComputeLoop), the row scales kept on chip (UB: shared memory here), then the attention rows of the
//   chunk; here one block of 256 threads per step: grid (cdiv(S, 32), B * N); thread t < 32 * 8 takes tail element
//   t % 8 of row t / 8, then the 256 threads stride over the chunk's rows x D outputs.
// No bug found (the op's README formula omits cur_softmax_sum from softmax_sum; the kernel has it). Changed: the NPU
// cores' tiling (bnNumGroup heads and a sequence slice per core, headDimLoopEach column chunks, double-buffered
// queues) became one CUDA block per (32-row chunk, head); the TND layout path (ring_attention_update_tnd.h) and its
// actual_seq_qlen are not ported; the aclnn call became a C++ launcher with device pointers, sizes, a layout string
// and a stream.
#include <assert.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace ring_attention_update {

constexpr int kSoftmaxTailSize = 8;  // 32 bytes of fp32: one NPU block
constexpr int kSeqNumLoopEach = 32;  // sequence rows per step
constexpr int kThreads = kSeqNumLoopEach * kSoftmaxTailSize;

__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ void cast_rint(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void cast_rint(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void cast_rint(float* p, float v) { *p = v; }

/* kerntune:
args  = ["prev_attn_out: in bf16[S * B * N * D]", "prev_softmax_max: in f32[B * N * S * 8] ~ uniform(-4, 12)",
         "prev_softmax_sum: in f32[B * N * S * 8] ~ uniform(1, 64)", "cur_attn_out: in bf16[S * B * N * D]",
         "cur_softmax_max: in f32[B * N * S * 8] ~ uniform(-4, 12)",
         "cur_softmax_sum: in f32[B * N * S * 8] ~ uniform(1, 64)", "attn_out: out bf16[S * B * N * D]",
         "softmax_max: out f32[B * N * S * 8]", "softmax_sum: out f32[B * N * S * 8]", "batch_size: i32 = B",
         "head_num: i32 = N", "seq_num: i32 = S", "head_dim: i32 = D"]
sizes = [{ S = 8192, B = 1, N = 32, D = 128 }, { S = 1, B = 8, N = 32, D = 128 }, { S = 1001, B = 1, N = 7, D = 80 }]
grid  = ["cdiv(S, 32)", "B * N"]
block = 256
template_args = ["__nv_bfloat16"]
*/
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ring_attention_update_kernel(const T* prev_attn_out, const float* prev_softmax_max, const float* prev_softmax_sum,
                                 const T* cur_attn_out, const float* cur_softmax_max, const float* cur_softmax_sum,
                                 T* attn_out, float* softmax_max, float* softmax_sum, int batch_size, int head_num,
                                 int seq_num, int head_dim) {
  __shared__ float prev_out_scale[kSeqNumLoopEach][kSoftmaxTailSize];  // softmaxTempBuf0
  __shared__ float cur_out_scale[kSeqNumLoopEach][kSoftmaxTailSize];   // softmaxTempBuf1

  const int64_t bn_num = (int64_t)batch_size * head_num;
  const int64_t bn_index = blockIdx.y;                                    // bnGmIndexLoop
  const int64_t seq_index = (int64_t)blockIdx.x * kSeqNumLoopEach;      // seqNumGmIndexLoop
  const int seq_num_loop = (int)min((int64_t)kSeqNumLoopEach, seq_num - seq_index);

  // SoftmaxComputeLoop: [B, N, S, 8], offset bn * (S * 8) + s * 8
  const int t = threadIdx.x;
  if (t < seq_num_loop * kSoftmaxTailSize) {
    const int64_t softmax_offset = bn_index * seq_num * kSoftmaxTailSize + seq_index * kSoftmaxTailSize + t;
    const float prev_max = prev_softmax_max[softmax_offset];
    const float cur_max = cur_softmax_max[softmax_offset];
    // softmax_max = torch.maximum(prev_softmax_max, cur_softmax_max)
    const float max_v = fmaxf(prev_max, cur_max);
    // prev_scale = exp(prev_softmax_max - softmax_max); cur_scale likewise
    const float prev_scale = expf(prev_max - max_v);
    const float cur_scale = expf(cur_max - max_v);
    // prev_softmax_sum_scaled = prev_softmax_sum * prev_scale; cur likewise
    const float prev_scaled = __fmul_rn(prev_softmax_sum[softmax_offset], prev_scale);
    const float cur_scaled = __fmul_rn(cur_softmax_sum[softmax_offset], cur_scale);
    // softmax_sum = prev_softmax_sum_scaled + cur_softmax_sum_scaled
    const float sum_v = __fadd_rn(prev_scaled, cur_scaled);
    softmax_max[softmax_offset] = max_v;
    softmax_sum[softmax_offset] = sum_v;
    // prev_out_scale = prev_softmax_sum_scaled / softmax_sum; cur likewise
    prev_out_scale[t / kSoftmaxTailSize][t % kSoftmaxTailSize] = __fdiv_rn(prev_scaled, sum_v);
    cur_out_scale[t / kSoftmaxTailSize][t % kSoftmaxTailSize] = __fdiv_rn(cur_scaled, sum_v);
  }
  __syncthreads();

  // AttnCompute: [S, B, H], offset s * (B * N * D) + bn * D + d
  const int attn_ele_num = seq_num_loop * head_dim;
  for (int i = t; i < attn_ele_num; i += kThreads) {
    const int r = i / head_dim;
    const int d = i - r * head_dim;
    const int64_t attn_offset = (seq_index + r) * bn_num * head_dim + bn_index * head_dim + d;
    const float prev_v = to_float(prev_attn_out[attn_offset]);
    const float cur_v = to_float(cur_attn_out[attn_offset]);
    // attn_out = prev_attn_out * prev_out_scale + cur_attn_out * cur_out_scale
    const float out_v = __fadd_rn(__fmul_rn(prev_v, prev_out_scale[r][0]), __fmul_rn(cur_v, cur_out_scale[r][0]));
    cast_rint(attn_out + attn_offset, out_v);
  }
}

}  // namespace ring_attention_update

// prev_attn_out, cur_attn_out, attn_out: device [S, B, N * D]; prev/cur_softmax_max, prev/cur_softmax_sum,
// softmax_max, softmax_sum: device [B, N, S, 8] fp32; layout "SBH" (the default; "TND" is not ported).
template <typename T>
void npu_ring_attention_update(const T* prev_attn_out, const float* prev_softmax_max, const float* prev_softmax_sum,
                               const T* cur_attn_out, const float* cur_softmax_max, const float* cur_softmax_sum,
                               T* attn_out, float* softmax_max, float* softmax_sum, int batch_size, int head_num,
                               int seq_num, int head_dim, const char* layout, cudaStream_t stream) {
  assert(layout == nullptr || strcmp(layout, "SBH") == 0);
  assert((int64_t)batch_size * head_num <= 65535);
  if (batch_size == 0 || head_num == 0 || seq_num == 0) return;
  using namespace ring_attention_update;
  const dim3 grid((seq_num + kSeqNumLoopEach - 1) / kSeqNumLoopEach, batch_size * head_num);
  ring_attention_update_kernel<T><<<grid, kThreads, 0, stream>>>(
      prev_attn_out, prev_softmax_max, prev_softmax_sum, cur_attn_out, cur_softmax_max, cur_softmax_sum, attn_out,
      softmax_max, softmax_sum, batch_size, head_num, seq_num, head_dim);
}

template void npu_ring_attention_update<__nv_bfloat16>(const __nv_bfloat16*, const float*, const float*,
                                                       const __nv_bfloat16*, const float*, const float*,
                                                       __nv_bfloat16*, float*, float*, int, int, int, int,
                                                       const char*, cudaStream_t);
template void npu_ring_attention_update<__half>(const __half*, const float*, const float*, const __half*,
                                                const float*, const float*, __half*, float*, float*, int, int, int,
                                                int, const char*, cudaStream_t);
template void npu_ring_attention_update<float>(const float*, const float*, const float*, const float*, const float*,
                                               const float*, float*, float*, float*, int, int, int, int, const char*,
                                               cudaStream_t);
