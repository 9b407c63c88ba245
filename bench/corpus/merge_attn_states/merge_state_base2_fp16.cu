// Merge of two attention states (fp16 values, fp32 log-sum-exps) in the style of FlashInfer's
// include/flashinfer/attention/cascade.cuh MergeStateKernel: lse laid out [seq_len, num_heads] and in base 2
// (exp2 / log2), argument order v_a, s_a, v_b, s_b, v_merged, s_merged, non-const input pointers, a kernel
// template over the input and output types. Scalar: a block per (position, head) with one thread per element of
// the head (FlashInfer's vec_size = 1 shape).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace cascade {

/* kerntune:
args  = ["v_a: in f16[seq_len * num_heads * head_dim]", "s_a: in f32[seq_len * num_heads] ~ uniform(-4, 12)",
         "v_b: in f16[seq_len * num_heads * head_dim]", "s_b: in f32[seq_len * num_heads] ~ uniform(-4, 12)",
         "v_merged: out f16[seq_len * num_heads * head_dim]", "s_merged: out f32[seq_len * num_heads]",
         "num_heads: u32 = num_heads", "head_dim: u32 = head_dim"]
sizes = [{ seq_len = 8192, num_heads = 32, head_dim = 128 }, { seq_len = 16, num_heads = 32, head_dim = 128 },
         { seq_len = 1001, num_heads = 28, head_dim = 128 }]
grid  = ["seq_len", "num_heads"]
block = "head_dim"
*/
template <typename DTypeIn, typename DTypeO>
__global__ void MergeStateKernel(DTypeIn* __restrict__ v_a, float* __restrict__ s_a, DTypeIn* __restrict__ v_b,
                                 float* __restrict__ s_b, DTypeO* __restrict__ v_merged,
                                 float* __restrict__ s_merged, uint32_t num_heads, uint32_t head_dim) {
  const uint32_t tx = threadIdx.x;
  const uint32_t pos = blockIdx.x;
  const uint32_t head_idx = blockIdx.y;

  float s_a_val = s_a[pos * num_heads + head_idx];
  float s_b_val = s_b[pos * num_heads + head_idx];
  const float s_max = fmaxf(s_a_val, s_b_val);
  s_a_val = exp2f(s_a_val - s_max);
  s_b_val = exp2f(s_b_val - s_max);
  const float a_scale = s_a_val / (s_a_val + s_b_val);
  const float b_scale = s_b_val / (s_a_val + s_b_val);

  const size_t offset = ((size_t)pos * num_heads + head_idx) * head_dim;
  for (uint32_t d = tx; d < head_dim; d += blockDim.x) {
    const float a = static_cast<float>(v_a[offset + d]);
    const float b = static_cast<float>(v_b[offset + d]);
    v_merged[offset + d] = static_cast<DTypeO>(a_scale * a + b_scale * b);
  }
  if (s_merged != nullptr && tx == 0) {
    s_merged[pos * num_heads + head_idx] = log2f(s_a_val + s_b_val) + s_max;
  }
}

template <typename DTypeIn, typename DTypeO>
cudaError_t MergeState(DTypeIn* v_a, float* s_a, DTypeIn* v_b, float* s_b, DTypeO* v_merged, float* s_merged,
                       uint32_t seq_len, uint32_t num_heads, uint32_t head_dim, cudaStream_t stream = nullptr) {
  dim3 nblks(seq_len, num_heads);
  dim3 nthrs(head_dim);
  MergeStateKernel<DTypeIn, DTypeO><<<nblks, nthrs, 0, stream>>>(v_a, s_a, v_b, s_b, v_merged, s_merged,
                                                                  num_heads, head_dim);
  return cudaGetLastError();
}

template cudaError_t MergeState<__half, __half>(__half*, float*, __half*, float*, __half*, float*, uint32_t,
                                                uint32_t, uint32_t, cudaStream_t);

}  // namespace cascade
