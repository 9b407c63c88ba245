// RMSNorm as the Dango_Infer LLM inference engine writes it for bf16 (HuskyLYL/Dango_Infer,
// dango_infer/src/op/cuda/rmsn.cu, bf16x8_kernel_cu::row_dim_bf16x8_rmsnorm_kernel<BLOCK_DIM> behind
// bf16x8_kernel_cu::rmsnorm_kernel, the 2-D [seq_len, dim] branch). One block of BLOCK_DIM = 128 threads per row,
// grid seq_len with a `bid >= seq_len` guard; each thread walks packs of 8 consecutive bf16 (starting at
// tid * 8, stepping blockDim.x * 8) but loads them one scalar at a time in an unrolled loop (no vector loads),
// then a scalar loop covers the dim % 8 tail columns with stride blockDim.x; the sum of squares in fp32 goes
// through base_kernel_cu::block_reduce_sum_f32<BLOCK_DIM> (a cub::BlockReduce Sum), thread 0 publishes it through a
// __shared__ float shared_val, every thread computes rsqrtf(shared_val / dim + eps) and re-reads x and the weight
// for the second pass, out = bf16(scale * x * w) with one rounding. Non-const pointers, argument order (in, wei,
// out, seq_len, dim_size, eps), eps fixed to 1e-5f by the host function, the stream taken from a void* (the null
// stream when it is null). The engine's tensor::Tensor arguments are replaced by raw pointers and sizes.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cub/cub.cuh>
#include <cstdint>

namespace base_kernel_cu {
template <int32_t BLOCK_DIM>
static __device__ float block_reduce_sum_f32(float val) {
  using BlockReduce = cub::BlockReduce<float, BLOCK_DIM>;
  __shared__ typename BlockReduce::TempStorage temp;
  return BlockReduce(temp).Sum(val);
}
}  // namespace base_kernel_cu

namespace bf16x8_kernel_cu
{
  /* kerntune:
  args  = ["in: in bf16[seq_len * dim_size]", "wei: in bf16[dim_size]", "out: out bf16[seq_len * dim_size]",
           "seq_len: i32 = seq_len", "dim_size: i32 = dim_size", "eps: f32 = 1e-5"]
  sizes = [{ seq_len = 16384, dim_size = 4096 }, { seq_len = 4, dim_size = 4096 },
           { seq_len = 999, dim_size = 1001 }]
  grid  = "seq_len"
  block = 128
  template_args = ["128"]
  */
  template <int32_t BLOCK_DIM>
  static __global__ void row_dim_bf16x8_rmsnorm_kernel(__nv_bfloat16* in, __nv_bfloat16* wei,
                                                       __nv_bfloat16* out, int seq_len,
                                                       int dim_size, float eps)
  {
    const int bid = blockIdx.x;
    const int tid = threadIdx.x;

    if (bid >= seq_len)
      return;

    __nv_bfloat16* block_in = in + (int64_t)bid * dim_size;
    __nv_bfloat16* block_out = out + (int64_t)bid * dim_size;

    constexpr int pack_size = 8;
    const int pack_num = dim_size / pack_size;
    const int pack_off = pack_size * pack_num;

    float sum = 0.0f;

    for (int i = tid * pack_size; i < pack_off; i += blockDim.x * pack_size)
    {
      #pragma unroll
      for (int k = 0; k < pack_size; ++k)
      {
        float v = __bfloat162float(block_in[i + k]);
        sum += v * v;
      }
    }

    // columns past the last full pack
    for (int i = pack_off + tid; i < dim_size; i += blockDim.x)
    {
      float v = __bfloat162float(block_in[i]);
      sum += v * v;
    }

    sum = base_kernel_cu::block_reduce_sum_f32<BLOCK_DIM>(sum);

    __shared__ float shared_val;
    if (threadIdx.x == 0)
      shared_val = sum;
    __syncthreads();

    const float scale = rsqrtf(shared_val / static_cast<float>(dim_size) + eps);

    for (int i = tid * pack_size; i < pack_off; i += blockDim.x * pack_size)
    {
      #pragma unroll
      for (int k = 0; k < pack_size; ++k)
      {
        float v = __bfloat162float(block_in[i + k]);
        float w = __bfloat162float(wei[i + k]);
        block_out[i + k] = __float2bfloat16(scale * v * w);
      }
    }

    for (int i = pack_off + tid; i < dim_size; i += blockDim.x)
    {
      float v = __bfloat162float(block_in[i]);
      float w = __bfloat162float(wei[i]);
      block_out[i] = __float2bfloat16(scale * v * w);
    }
  }

  // input: device [seq_len, dim] bf16, weight: [dim], output: [seq_len, dim]; stream may be null.
  void rmsnorm_kernel(const __nv_bfloat16* input, const __nv_bfloat16* weight, __nv_bfloat16* output,
                      int32_t seq_len, int32_t tensor_dim, void* stream)
  {
    const float eps = 1e-5f;
    auto cuda_stream = static_cast<cudaStream_t>(stream);

    __nv_bfloat16* in_ptr = const_cast<__nv_bfloat16*>(input);
    __nv_bfloat16* wei_ptr = const_cast<__nv_bfloat16*>(weight);
    __nv_bfloat16* out_ptr = output;

    const dim3 blocks(seq_len);
    if (cuda_stream)
      row_dim_bf16x8_rmsnorm_kernel<128><<<blocks, 128, 0, cuda_stream>>>(
          in_ptr, wei_ptr, out_ptr, seq_len, tensor_dim, eps);
    else
      row_dim_bf16x8_rmsnorm_kernel<128><<<blocks, 128>>>(
          in_ptr, wei_ptr, out_ptr, seq_len, tensor_dim, eps);
  }
}  // namespace bf16x8_kernel_cu
