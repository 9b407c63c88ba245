// Rotary embedding as NVIDIA Transformer Engine's fused_rope (the Megatron-core apply_rotary_pos_emb fusion) does
// its forward: tensors in Megatron's SBHD layout, src and dst [s, b, h, d] addressed through explicit strides
// (stride_s, stride_b, stride_h, stride_d and the o_stride_* of the output), no cos/sin cache: freqs fp32
// [s, 1, 1, d2] holds the ANGLES (position * inv_freq, the two halves duplicated as Megatron builds them), and
// each block turns its position's d2 angles into cos and sin with sincosf into dynamic shared memory
// (2 * d2 floats) before rotating. NeoX / rotate_half pairing over the first d2 channels:
// dst[i] = x[i] * cos[i] + rotate(x)[i] * sin[i], rotate(x)[i] = -x[i + d2 / 2] in the first half and
// x[i - d2 / 2] in the second; channels d2..d (partial rotary) copied through. fp32 math, one bf16 rounding.
// Launch: grid (s, b), block (32, h < 16 ? 4 : 8) with threadIdx.y striding the heads and threadIdx.x the channels.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstddef>

constexpr int THREADS_PER_WARP = 32;

/* kerntune:
args  = ["src: in bf16[s * b * h * d]", "freqs: in f32[s * d2] ~ uniform(0, 64)", "dst: out bf16[s * b * h * d]",
         "h: i32 = h", "d: i32 = d", "d2: i32 = d2", "stride_s: i32 = b * h * d", "stride_b: i32 = h * d",
         "stride_h: i32 = d", "stride_d: i32 = 1", "o_stride_s: i32 = b * h * d", "o_stride_b: i32 = h * d",
         "o_stride_h: i32 = d", "o_stride_d: i32 = 1"]
sizes = [{ s = 4096, b = 2, h = 32, d = 128, d2 = 128 }, { s = 1, b = 16, h = 32, d = 128, d2 = 128 },
         { s = 333, b = 3, h = 7, d = 80, d2 = 40 }]
grid  = ["s", "b"]
block = [32, "4 if h < 16 else 8"]
smem  = "2 * d2 * 4"
*/
template <typename scalar_t>
__global__ void fused_rope_forward_kernel(const scalar_t* src, const float* freqs, scalar_t* dst, const int h,
                                          const int d, const int d2, const int stride_s, const int stride_b,
                                          const int stride_h, const int stride_d, const int o_stride_s,
                                          const int o_stride_b, const int o_stride_h, const int o_stride_d) {
  const int s_id = blockIdx.x;
  const int b_id = blockIdx.y;
  const int offset_block = s_id * stride_s + b_id * stride_b;
  const int offset_block_dst = s_id * o_stride_s + b_id * o_stride_b;

  extern __shared__ float shared_mem_cos_sin[];
  float* shared_cos = shared_mem_cos_sin;
  float* shared_sin = shared_mem_cos_sin + d2;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int i = tid; i < d2; i += blockDim.x * blockDim.y) {
    sincosf(freqs[s_id * d2 + i], &shared_sin[i], &shared_cos[i]);
  }
  __syncthreads();

  for (int h_id = threadIdx.y; h_id < h; h_id += blockDim.y) {
    for (int d_id = threadIdx.x; d_id < d2; d_id += blockDim.x) {
      const int offset_src = offset_block + h_id * stride_h + d_id * stride_d;
      const int offset_dst = offset_block_dst + h_id * o_stride_h + d_id * o_stride_d;
      const float v_src = static_cast<float>(src[offset_src]);
      const float v_src_rotate = (d_id + d2 / 2 < d2)
                                     ? -static_cast<float>(src[offset_src + (d2 / 2) * stride_d])
                                     : static_cast<float>(src[offset_src - (d2 / 2) * stride_d]);
      dst[offset_dst] = static_cast<scalar_t>(v_src * shared_cos[d_id] + v_src_rotate * shared_sin[d_id]);
    }
  }

  // the channels past the rotary dimension are copied through
  if (d > d2) {
    for (int h_id = threadIdx.y; h_id < h; h_id += blockDim.y) {
      for (int d_id = d2 + threadIdx.x; d_id < d; d_id += blockDim.x) {
        dst[offset_block_dst + h_id * o_stride_h + d_id * o_stride_d] =
            src[offset_block + h_id * stride_h + d_id * stride_d];
      }
    }
  }
}

// Host side (fused_rope_forward for a contiguous SBHD input and output): device pointers.
void fused_rope_forward_bf16(const __nv_bfloat16* input, const float* freqs, __nv_bfloat16* output, const int s,
                             const int b, const int h, const int d, const int d2, cudaStream_t stream) {
  const int stride_s = b * h * d, stride_b = h * d, stride_h = d, stride_d = 1;
  const int warps_per_block = h < 16 ? 4 : 8;
  dim3 blocks(s, b);
  dim3 threads(THREADS_PER_WARP, warps_per_block);
  const size_t shared_mem_size = 2 * d2 * sizeof(float);
  fused_rope_forward_kernel<<<blocks, threads, shared_mem_size, stream>>>(
      input, freqs, output, h, d, d2, stride_s, stride_b, stride_h, stride_d, stride_s, stride_b, stride_h,
      stride_d);
}
