// Layer norm without weight or bias (fp32) in the style of llama.cpp's ggml-cuda norm.cu (`norm_f32`): ggml applies
// the weight and the bias as separate ops. Mean and variance from one pass that sums (x, x * x) as a float2,
// reduced by a warp_reduce_sum over float2 and a shared float2[32] across warps; var = E[x^2] - mean^2; eps inside
// the root. The block size a template parameter chosen by the host (one warp for short rows, 1024 threads
// otherwise), a 3-D grid (row, channel, sample) over a strided source; dst contiguous.
#include <cuda_runtime.h>
#include <cstdint>

#define WARP_SIZE 32

static __device__ __forceinline__ float2 warp_reduce_sum(float2 a) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    a.x += __shfl_xor_sync(0xffffffff, a.x, offset, 32);
    a.y += __shfl_xor_sync(0xffffffff, a.y, offset, 32);
  }
  return a;
}

/* kerntune:
args  = ["x: in f32[nrows * ncols]", "dst: out f32[nrows * ncols]", "ncols: i32 = ncols", "stride_row: i64 = ncols",
         "stride_channel: i64 = nrows * ncols", "stride_sample: i64 = nrows * ncols", "eps: f32 = 1e-5"]
sizes = [{ nrows = 8192, ncols = 4096 }, { nrows = 16, ncols = 8192 }, { nrows = 1001, ncols = 3077 }]
grid  = ["nrows", 1, 1]
block = "32 if ncols < 1024 else 1024"
template_args = ["1024"]
rtol  = 1e-4
atol  = 1e-4
*/
template <int block_size>
static __global__ void norm_f32(const float * x, float * dst, const int ncols, const int64_t stride_row,
                                const int64_t stride_channel, const int64_t stride_sample, const float eps) {
  const int nrows     = gridDim.x;
  const int nchannels = gridDim.y;

  const int row     = blockIdx.x;
  const int channel = blockIdx.y;
  const int sample  = blockIdx.z;
  const int tid     = threadIdx.x;

  x   += sample*stride_sample + channel*stride_channel + row*stride_row;
  dst += ((sample*nchannels + channel)*nrows + row)*ncols;

  float2 mean_var = make_float2(0.0f, 0.0f);

  for (int col = tid; col < ncols; col += block_size) {
    const float xi = x[col];
    mean_var.x += xi;
    mean_var.y += xi * xi;
  }

  // sum up partial sums
  mean_var = warp_reduce_sum(mean_var);
  if constexpr (block_size > WARP_SIZE) {
    static_assert(block_size == 1024, "unexpected block_size");
    __shared__ float2 s_sum[32];
    const int warp_id = threadIdx.x / WARP_SIZE;
    const int lane_id = threadIdx.x % WARP_SIZE;
    if (lane_id == 0) {
      s_sum[warp_id] = mean_var;
    }
    __syncthreads();
    mean_var = s_sum[lane_id];
    mean_var = warp_reduce_sum(mean_var);
  }

  const float mean = mean_var.x / ncols;
  const float var = mean_var.y / ncols - mean * mean;
  const float inv_std = rsqrtf(var + eps);

  for (int col = tid; col < ncols; col += block_size) {
    dst[col] = (x[col] - mean) * inv_std;
  }
}

static void norm_f32_cuda(const float * x, float * dst, const int ncols, const int nrows, const int nchannels,
                          const int nsamples, const int64_t stride_row, const int64_t stride_channel,
                          const int64_t stride_sample, const float eps, cudaStream_t stream) {
  const dim3 blocks_num(nrows, nchannels, nsamples);
  if (ncols < 1024) {
    const dim3 block_dims(WARP_SIZE, 1, 1);
    norm_f32<WARP_SIZE><<<blocks_num, block_dims, 0, stream>>>(x, dst, ncols, stride_row, stride_channel,
                                                               stride_sample, eps);
  } else {
    const dim3 block_dims(1024, 1, 1);
    norm_f32<1024><<<blocks_num, block_dims, 0, stream>>>(x, dst, ncols, stride_row, stride_channel,
                                                          stride_sample, eps);
  }
}

// x, dst: contiguous [nrows, ncols]
void ggml_cuda_op_norm_contiguous(const float * x, float * dst, int nrows, int ncols, float eps,
                                  cudaStream_t stream) {
  const int64_t s01 = ncols;
  const int64_t s02 = (int64_t)nrows * ncols;
  norm_f32_cuda(x, dst, ncols, nrows, 1, 1, s01, s02, s02, eps, stream);
}
