// RMSNorm (fp32) in the style of llama.cpp's ggml-cuda norm.cu: no weight (ggml multiplies by the weight in a
// separate op), the block size a template parameter chosen by the host (one warp for short rows, 1024 threads
// otherwise), warp_reduce_sum plus a 32-float shared buffer, a 3-D grid (row, channel, sample) over a strided
// tensor. Here it is launched on a contiguous [rows, ncols] tensor: one channel, one sample.
#include <cuda_runtime.h>
#include <cstdint>

#define WARP_SIZE 32

static __device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    x += __shfl_xor_sync(0xffffffff, x, offset, 32);
  }
  return x;
}

/* kerntune:
args  = ["x: in f32[nrows * ncols]", "dst: out f32[nrows * ncols]", "ncols: i32 = ncols", "stride_row: i64 = ncols",
         "stride_channel: i64 = nrows * ncols", "stride_sample: i64 = nrows * ncols", "eps: f32 = 1e-5"]
sizes = [{ nrows = 4096, ncols = 4096 }, { nrows = 32, ncols = 14336 }, { nrows = 1000, ncols = 4099 }]
grid  = ["nrows", 1, 1]
block = "32 if ncols < 1024 else 1024"
template_args = ["1024"]
*/
template <int block_size>
static __global__ void rms_norm_f32(const float * x, float * dst, const int ncols, const int64_t stride_row,
                                    const int64_t stride_channel, const int64_t stride_sample, const float eps) {
  const int nrows     = gridDim.x;
  const int nchannels = gridDim.y;

  const int row     = blockIdx.x;
  const int channel = blockIdx.y;
  const int sample  = blockIdx.z;
  const int tid     = threadIdx.x;

  x   += sample*stride_sample + channel*stride_channel + row*stride_row;
  dst += ((sample*nchannels + channel)*nrows + row)*ncols;

  float tmp = 0.0f; // partial sum for thread in warp

  for (int col = tid; col < ncols; col += block_size) {
    const float xi = x[col];
    tmp += xi * xi;
  }

  // sum up partial sums
  tmp = warp_reduce_sum(tmp);
  if constexpr (block_size > WARP_SIZE) {
    static_assert(block_size == 1024, "unexpected block_size");
    __shared__ float s_sum[32];
    const int warp_id = threadIdx.x / WARP_SIZE;
    const int lane_id = threadIdx.x % WARP_SIZE;
    if (lane_id == 0) {
      s_sum[warp_id] = tmp;
    }
    __syncthreads();
    tmp = s_sum[lane_id];
    tmp = warp_reduce_sum(tmp);
  }

  const float mean = tmp / ncols;
  const float scale = rsqrtf(mean + eps);

  for (int col = tid; col < ncols; col += block_size) {
    dst[col] = scale * x[col];
  }
}

static void rms_norm_f32_cuda(const float * x, float * dst, const int ncols, const int nrows, const int nchannels,
                              const int nsamples, const int64_t stride_row, const int64_t stride_channel,
                              const int64_t stride_sample, const float eps, cudaStream_t stream) {
  const dim3 blocks_num(nrows, nchannels, nsamples);
  if (ncols < 1024) {
    const dim3 block_dims(WARP_SIZE, 1, 1);
    rms_norm_f32<WARP_SIZE><<<blocks_num, block_dims, 0, stream>>>(x, dst, ncols, stride_row, stride_channel,
                                                                   stride_sample, eps);
  } else {
    const dim3 block_dims(1024, 1, 1);
    rms_norm_f32<1024><<<blocks_num, block_dims, 0, stream>>>(x, dst, ncols, stride_row, stride_channel,
                                                              stride_sample, eps);
  }
}

// x, dst: contiguous [nrows, ncols]
void ggml_cuda_op_rms_norm_contiguous(const float * x, float * dst, int nrows, int ncols, float eps,
                                      cudaStream_t stream) {
  const int64_t s01 = ncols;
  const int64_t s02 = (int64_t)nrows * ncols;
  rms_norm_f32_cuda(x, dst, ncols, nrows, 1, 1, s01, s02, s02, eps, stream);
}
