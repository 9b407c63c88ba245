// Attention-score softmax as NetEase-FuXi's EET (Easy and Efficient Transformer) writes it for its BERT / GPT-2
// self-attention (csrc/core/bert_softmax.cu, the need_sequence_mask path of bert_softmax_kernel, itself modified
// from FasterTransformer v3.1's open_attention softmax): IN PLACE on the fp16 scores qk_buf [batch, heads, seq_len,
// seq_len], the mask built on the fly from two things only: a causal mask (key > query) and a per-sequence RIGHT
// padding length padding_len int64 [batch] (the last padding_len keys and queries of a sequence are padding).
// One block per (batch, head) with ONE THREAD PER KEY (blockDim.x = next power of two >= seq_len, 32 ... 1024, so
// seq_len <= 1024), the block looping over the query rows i < seq_len - padding_len: each thread reads its score,
// adds -1e20f where masked, blockReduceMax (warp __shfl_xor_sync butterflies + a static __shared__ float[32]),
// s_max in a __shared__ float, __expf(x - s_max), blockReduceSum, s_sum = sum + 1e-6f in a __shared__ float,
// writes T(e / s_sum); then the padded query rows are written with zeros. int offsets advanced by seq_len per row.
// A non-template kernel would be FasterTransformer's; EET templates it over T and instantiates float and half.
// padding_len randint(0, seq_len / 2).
// Tolerance: probabilities ~1/seq_len for late rows, far below the default f16 atol of 1e-2, so atol is 1e-6.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

#define FINAL_MASK 0xffffffff

template <typename T>
__inline__ __device__ T warpReduceSum(T val) {
  for (int mask = 16; mask > 0; mask >>= 1)
    val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  return val;
}

template <typename T>
__inline__ __device__ T blockReduceSum(T val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  val = warpReduceSum<T>(val);
  if (lane == 0)
    shared[wid] = val;
  __syncthreads();

  val = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane] : (T)(0.0f);
  val = warpReduceSum<T>(val);
  return val;
}

template <typename T>
__inline__ __device__ T warpReduceMax(T val) {
  for (int mask = 16; mask > 0; mask >>= 1)
    val = max(val, __shfl_xor_sync(FINAL_MASK, val, mask, 32));
  return val;
}

template <typename T>
__inline__ __device__ T blockReduceMax(T val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  val = warpReduceMax(val);
  if (lane == 0)
    shared[wid] = val;
  __syncthreads();

  val = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane] : -1e20f;
  val = warpReduceMax(val);
  return val;
}

/* kerntune:
args  = ["qk_buf: inout f16[batch_size * head_num * seq_len * seq_len]",
         "padding_len: in i64[batch_size] ~ randint(0, seq_len / 2)",
         "head_num: i32 = head_num", "seq_len: i32 = seq_len"]
sizes = [{ batch_size = 8, head_num = 16, seq_len = 512 }, { batch_size = 2, head_num = 12, seq_len = 32 },
         { batch_size = 3, head_num = 7, seq_len = 333 }]
grid  = "batch_size * head_num"
block = "32 if seq_len <= 32 else 64 if seq_len <= 64 else 128 if seq_len <= 128 else 256 if seq_len <= 256 else 512 if seq_len <= 512 else 1024"
atol  = 1e-6
template_args = ["half"]
*/
template <typename T>
__global__ void softmax_kernel_v2(T *qk_buf, const int64_t *padding_len, const int head_num, const int seq_len)
{
  int batch_id = blockIdx.x / head_num;
  int qk_offset = blockIdx.x * seq_len * seq_len;
  __shared__ float s_sum, s_max;

  int right_padding_len = 0;
  if (padding_len != nullptr)
  {
    right_padding_len = padding_len[batch_id];
  }

  for (int i = 0; i < seq_len - right_padding_len; ++i)
  {
    float qk = threadIdx.x < seq_len ? (float)qk_buf[threadIdx.x + qk_offset] : 0.0f;
    float mask_val = (threadIdx.x > i || threadIdx.x >= seq_len - right_padding_len) ? -1e20f : 0.0f;

    float tmp = threadIdx.x < seq_len ? (float)(qk + mask_val) : -1e20f;
    float max_val = blockReduceMax<float>(tmp);

    if (threadIdx.x == 0)
      s_max = max_val;
    __syncthreads();

    qk = threadIdx.x < seq_len ? __expf(tmp - s_max) : 0.0f;

    float sum_val = blockReduceSum<float>(qk);

    if (threadIdx.x == 0)
    {
      s_sum = sum_val + 1e-6f;
    }
    __syncthreads();

    if (threadIdx.x < seq_len)
      qk_buf[threadIdx.x + qk_offset] = (T)(qk / s_sum);

    qk_offset += seq_len;
  }

  for (int i = seq_len - right_padding_len; i < seq_len; ++i)
  {
    if (threadIdx.x < seq_len)
      qk_buf[threadIdx.x + qk_offset] = (T)0.0f;
    qk_offset += seq_len;
  }
}

// qk_buf: [batch_size, head_num, seq_len, seq_len] scores (already scaled), softmaxed in place; padding_len:
// [batch_size] int64 right-padding lengths (nullptr: none). seq_len <= 1024.
template <class T>
void gpt2_self_softmax_kernel(void *qk_buf, const int64_t *padding_len, const int &batch_size, const int &head_num,
                              const int &seq_len, const cudaStream_t stream)
{
  dim3 grid, block;

  if (seq_len <= 32)
    block.x = 32;
  else if (seq_len > 32 && seq_len <= 64)
    block.x = 64;
  else if (seq_len > 64 && seq_len <= 128)
    block.x = 128;
  else if (seq_len > 128 && seq_len <= 256)
    block.x = 256;
  else if (seq_len > 256 && seq_len <= 512)
    block.x = 512;
  else
    block.x = 1024;

  grid.x = batch_size * head_num;
  softmax_kernel_v2<T><<<grid, block, 0, stream>>>((T *)qk_buf, padding_len, head_num, seq_len);
}

template void gpt2_self_softmax_kernel<float>(void *qk_buf, const int64_t *padding_len, const int &batch_size,
                                              const int &head_num, const int &seq_len, const cudaStream_t stream);
template void gpt2_self_softmax_kernel<half>(void *qk_buf, const int64_t *padding_len, const int &batch_size,
                                             const int &head_num, const int &seq_len, const cudaStream_t stream);
