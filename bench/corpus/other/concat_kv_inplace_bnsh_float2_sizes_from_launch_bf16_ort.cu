// KV-cache append as ONNX Runtime's GroupQueryAttention writes it (onnxruntime/contrib_ops/cuda/bert/
// group_query_attention_impl.cu, ConcatKVInPlace / LaunchConcatKVInPlace): the present K (or V) buffer is the
// past buffer itself, preallocated to max_seqlen positions ("past-present share buffer"), and the new tokens'
// keys are copied into it in place at their positions:
//   past_seq_len = seqlens_k[b] + 1 - new_seqlen        GQA's seqlens_k input is total_sequence_length - 1
//   kv_buff[b, n, past_seq_len + s, :] = new_kv[b, s, n, :]
// with the present buffer BNSH [batch, kv_num_heads, max_seqlen, head_size] and the new K BSNH
// [batch, new_seqlen, kv_num_heads, head_size] (both layouts run-time flags); the rest of the buffer is untouched.
// ORT's conventions: the kernel reads EVERY size from the launch configuration (new_seqlen = gridDim.x,
// kv_num_heads = blockDim.y, H = blockDim.x), grid (new_seqlen, batch), block (H, kv_num_heads); 2-byte data are
// moved as float2 (4 elements, H = head_size / 4; the kernel is instantiated as ConcatKVInPlace<float2> for half
// and bfloat16 alike), the INDEX_4D macro for offsets, int offsets; heads * H above max_threads_per_block go to a
// flat ConcatKVInPlaceLarge instead. The launcher here takes one tensor (ORT calls it for K, then for V).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cassert>
#include <cmath>

#define INDEX_4D(d1, d2, d3, i0, i1, i2, i3) (((i0) * (d1) + (i1)) * (d2) + (i2)) * (d3) + (i3)

namespace onnxruntime {
namespace contrib {
namespace cuda {

// Kernel to append new kv to kv buffer in place
/* kerntune:
args  = ["max_seqlen: i32 = max_seqlen", "kv_buff: inout bf16[batch * kv_heads * max_seqlen * head_size]",
         "new_kv: in bf16[batch * new_seqlen * kv_heads * head_size]",
         "seqlens_k: in i32[batch] ~ randint(new_seqlen - 1, max_seqlen)",
         "is_past_kv_bnsh_format: u8 = 1", "is_new_kv_bnsh_format: u8 = 0"]
sizes = [{ batch = 8, new_seqlen = 2048, kv_heads = 8, head_size = 128, max_seqlen = 4096 },
         { batch = 16, new_seqlen = 1, kv_heads = 8, head_size = 128, max_seqlen = 4096 },
         { batch = 3, new_seqlen = 37, kv_heads = 5, head_size = 96, max_seqlen = 1001 }]
grid  = ["new_seqlen", "batch"]
block = ["head_size / 4", "kv_heads"]
bytes = "2 * batch * new_seqlen * kv_heads * head_size * 2 + 4 * batch"
template_args = ["float2"]
*/
template <typename T>
__global__ void ConcatKVInPlace(const int max_seqlen,
                                T* kv_buff,
                                const T* new_kv,
                                const int* seqlens_k,
                                const bool is_past_kv_bnsh_format,
                                const bool is_new_kv_bnsh_format) {
  const int h = threadIdx.x;
  const int n = threadIdx.y;
  const int s = blockIdx.x;
  const int b = blockIdx.y;

  const int new_seqlen = gridDim.x;
  const int kv_num_heads = blockDim.y;
  const int H = blockDim.x;

  const int past_seq_len = seqlens_k[b] + 1 - new_seqlen;

  int out_offset = is_past_kv_bnsh_format
                       ? INDEX_4D(kv_num_heads, max_seqlen, H, b, n, s + past_seq_len, h)
                       : INDEX_4D(max_seqlen, kv_num_heads, H, b, s + past_seq_len, n, h);

  int in_offset = is_new_kv_bnsh_format
                      ? INDEX_4D(kv_num_heads, new_seqlen, H, b, n, s, h)
                      : INDEX_4D(new_seqlen, kv_num_heads, H, b, s, n, h);

  kv_buff[out_offset] = new_kv[in_offset];
}

// the same with the (head, element) pair flattened over x, for heads * H above the block limit
template <typename T>
__global__ void ConcatKVInPlaceLarge(const int max_seqlen,
                                     const int H,
                                     const int kv_num_heads,
                                     T* kv_buff,
                                     const T* new_kv,
                                     const int* seqlens_k,
                                     const bool is_past_kv_bnsh_format,
                                     const bool is_new_kv_bnsh_format) {
  int i = threadIdx.x + (blockDim.x * blockIdx.x);
  if (i < H * kv_num_heads) {
    const int h = i % H;
    const int n = i / H;
    const int s = blockIdx.y;
    const int b = blockIdx.z;
    const int new_seqlen = gridDim.y;
    const int past_seq_len = seqlens_k[b] + 1 - new_seqlen;

    int out_offset = is_past_kv_bnsh_format
                         ? INDEX_4D(kv_num_heads, max_seqlen, H, b, n, s + past_seq_len, h)
                         : INDEX_4D(max_seqlen, kv_num_heads, H, b, s + past_seq_len, n, h);

    int in_offset = is_new_kv_bnsh_format
                        ? INDEX_4D(kv_num_heads, new_seqlen, H, b, n, s, h)
                        : INDEX_4D(new_seqlen, kv_num_heads, H, b, s, n, h);

    kv_buff[out_offset] = new_kv[in_offset];
  }
}

// Concat new to kv buffer in place: present [batch, kv_num_heads, max_sequence_length, head_size] when
// is_past_kv_bnsh_format, new [batch, new_seq_len, kv_num_heads, head_size]; device pointers, head_size % 4 == 0.
template <typename T>
cudaError_t LaunchConcatKVInPlace(int batch_size,
                                  int kv_num_heads,
                                  int head_size,
                                  int max_sequence_length,
                                  const int* seqlens_k,
                                  int new_seq_len,
                                  const T* new_kv,
                                  T* present_kv,
                                  const bool is_past_kv_bnsh_format,
                                  const bool is_new_kv_bnsh_format,
                                  cudaStream_t stream,
                                  const int max_threads_per_block) {
  static_assert(sizeof(T) == 2, "2-byte types are moved four at a time as float2");
  assert(head_size % 4 == 0);

  const int H = head_size / 4;
  if (H * kv_num_heads <= max_threads_per_block) {
    const dim3 grid(new_seq_len, batch_size, 1);
    const dim3 block(H, kv_num_heads, 1);
    ConcatKVInPlace<float2><<<grid, block, 0, stream>>>(max_sequence_length,
                                                        reinterpret_cast<float2*>(present_kv),
                                                        reinterpret_cast<const float2*>(new_kv),
                                                        seqlens_k,
                                                        is_past_kv_bnsh_format,
                                                        is_new_kv_bnsh_format);
  } else {
    int steps = int(ceil(float(H * kv_num_heads) / 256.0));
    const dim3 grid(steps, new_seq_len, batch_size);
    const dim3 block(256, 1, 1);
    ConcatKVInPlaceLarge<float2><<<grid, block, 0, stream>>>(max_sequence_length,
                                                             H,
                                                             kv_num_heads,
                                                             reinterpret_cast<float2*>(present_kv),
                                                             reinterpret_cast<const float2*>(new_kv),
                                                             seqlens_k,
                                                             is_past_kv_bnsh_format,
                                                             is_new_kv_bnsh_format);
  }
  return cudaGetLastError();
}

template cudaError_t LaunchConcatKVInPlace<__nv_bfloat16>(int, int, int, int, const int*, int,
                                                          const __nv_bfloat16*, __nv_bfloat16*, const bool,
                                                          const bool, cudaStream_t, const int);

}  // namespace cuda
}  // namespace contrib
}  // namespace onnxruntime
