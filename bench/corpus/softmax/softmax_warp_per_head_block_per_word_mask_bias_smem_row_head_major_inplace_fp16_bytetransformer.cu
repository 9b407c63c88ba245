// Attention-score softmax as ByteDance's ByteTransformer (a BERT inference library for variable-length inputs;
// bytetransformer/include/softmax.h, softmax_kernel_warp behind softmax_kernelLauncher, called by the unfused
// attention path in attention_nofused.cu after the batched Q.K^T GEMM) writes it: IN PLACE on the fp16 scores
// qk_buf laid out HEAD-MAJOR [head_num, batch_size, seq_len, seq_len] (the strided-batched GEMM's batch index is
// head * batch_size + batch), with
//   - an optional additive attention bias atten_bias [head_num, seq_len, seq_len] (same dtype, shared by the batch),
//   - an attention mask atten_mask [batch_size, seq_len, seq_len] of 1 (keep) / 0 (drop) stored in the compute
//     dtype and turned into an additive (1 - mask) * -10000.0f, BERT's extended-mask constant (no -inf).
// The scores come in already scaled (the GEMM's alpha is 1/sqrt(size_per_head)), so no scale here.
// Launch: one block per (batch, query word): grid batch_size * seq_len, block (32, head_num): ONE WARP PER HEAD,
// threadIdx.y the head. Each warp stages its whole row of masked scores as fp32 in dynamic shared memory
// (head_num * seq_len floats, the launcher raising the limit to 64 KiB past 48 KiB), max by warpReduceMax
// (xor shuffles), __expf(x - max) written back to shared memory and summed by warpReduceSum, then
// __fdividef(1.0f, sum + 1e-6f) and T(e * inv) stored. int offsets throughout.
// The launcher's fp16 fast paths (half2 register kernels for even seq_len <= 1024, a half2 shared-memory kernel
// for even seq_len > 1024) are cut: this file keeps the scalar softmax_kernel_warp<T> path, the one ByteTransformer
// runs for fp32 and for odd sequence lengths, instantiated for half.
// mask randint(0, 2); bias uniform.
// Tolerance: probabilities ~1/seq_len, far below the default f16 atol of 1e-2, so atol is 1e-6.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdio>

namespace bytetransformer {

enum class OperationType { FP32, HALF };

#define FINAL_MASK 0xffffffff

template <typename T>
__inline__ __device__ T warpReduceSum(T val) {
  for (int mask = 16; mask > 0; mask >>= 1)
    val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  return val;
}

template <typename T>
__inline__ __device__ T warpReduceMax(T val) {
  for (int mask = 16; mask > 0; mask >>= 1)
    val = max(val, __shfl_xor_sync(FINAL_MASK, val, mask, 32));
  return val;
}

// Tolerance: softmax probabilities (~1/seq_len) are far below the default f16 atol, so atol is 1e-6.
/* kerntune:
args  = ["qk_buf: inout f16[head_num * batch_size * seq_len * seq_len]",
         "atten_bias: in f16[head_num * seq_len * seq_len]",
         "atten_mask: in f16[batch_size * seq_len * seq_len] ~ randint(0, 2)",
         "batch_size: i32 = batch_size", "head_num: i32 = head_num", "seq_len: i32 = seq_len"]
sizes = [{ batch_size = 16, head_num = 12, seq_len = 512 }, { batch_size = 1, head_num = 12, seq_len = 64 },
         { batch_size = 3, head_num = 16, seq_len = 333 }]
grid  = "batch_size * seq_len"
block = [32, "head_num"]
smem  = "head_num * seq_len * 4"
atol  = 1e-6
template_args = ["half"]
*/
template <typename T>
__global__ void softmax_kernel_warp(T *qk_buf, const T *atten_bias, const T *atten_mask,
                                    const int batch_size, const int head_num, const int seq_len) {
  int word_id = blockIdx.x;
  int batch_id = word_id / seq_len;
  int seq_id = word_id % seq_len;
  int warp_tid = threadIdx.x;
  int head_id = threadIdx.y;
  int qk_offset = ((head_id * batch_size + batch_id) * seq_len + seq_id) * seq_len;
  int mask_offset = (batch_id * seq_len + seq_id) * seq_len;
  int bias_offset = (head_id * seq_len + seq_id) * seq_len;

  extern __shared__ float shmem[];
  float *s_row_qk = shmem + head_id * seq_len;

  float max_v = -1e20f;
  for (int col_id = warp_tid; col_id < seq_len; col_id += warpSize) {
    float qk = (float)qk_buf[qk_offset + col_id];
    if (atten_bias)
      qk += (float)atten_bias[bias_offset + col_id];
    float mask_val = (1.0f - (float)atten_mask[mask_offset + col_id]) * -10000.0f;
    float tmp = qk + mask_val;
    s_row_qk[col_id] = tmp;
    max_v = tmp > max_v ? tmp : max_v;
  }
  max_v = warpReduceMax<float>(max_v);

  float exp_sum = 0.0f;
  for (int col_id = warp_tid; col_id < seq_len; col_id += warpSize) {
    float e = __expf(s_row_qk[col_id] - max_v);
    s_row_qk[col_id] = e;
    exp_sum += e;
  }
  exp_sum = warpReduceSum<float>(exp_sum);

  float inv_sum = __fdividef(1.0f, exp_sum + 1e-6f);
  for (int col_id = warp_tid; col_id < seq_len; col_id += warpSize)
    qk_buf[qk_offset + col_id] = (T)(s_row_qk[col_id] * inv_sum);
}

// qk_buf: [head_num, batch_size, seq_len, seq_len] scores, softmaxed in place; atten_bias: [head_num, seq_len,
// seq_len] or nullptr; atten_mask: [batch_size, seq_len, seq_len] of 0 / 1. head_num * seq_len floats of shared
// memory must fit in 64 KiB.
template <OperationType OpType, typename T>
void softmax_kernelLauncher(T *qk_buf, const T *atten_bias, const T *atten_mask, const int batch_size,
                            const int seq_len, const int head_num, cudaStream_t stream) {
  dim3 grid(batch_size * seq_len), block(32, head_num);

  const int shmem_size = head_num * seq_len * sizeof(float);
  if (shmem_size > 64 * 1024)
    printf("Not Enough Shared Memory for Softmax\n");

  if (shmem_size > 48 * 1024)
    cudaFuncSetAttribute(softmax_kernel_warp<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
  softmax_kernel_warp<T><<<grid, block, shmem_size, stream>>>(qk_buf, atten_bias, atten_mask, batch_size,
                                                              head_num, seq_len);
}

template void softmax_kernelLauncher<OperationType::FP32, float>(float *, const float *, const float *, const int,
                                                                 const int, const int, cudaStream_t);
template void softmax_kernelLauncher<OperationType::HALF, half>(half *, const half *, const half *, const int,
                                                                const int, const int, cudaStream_t);

}  // namespace bytetransformer
