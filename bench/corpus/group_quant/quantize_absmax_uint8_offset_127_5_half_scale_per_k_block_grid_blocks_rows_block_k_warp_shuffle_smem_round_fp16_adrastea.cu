// Block-wise absmax quantization to uint8 in the style of Adrastea (eiz/adrastea, a CUDA/HIP LLaMA runner:
// adrastea_kernels/cpp/quantize.cu and llama_cu quantize_absmax_uint8, used by its fp16 -> uint8 model converter
// and the matmul_nt_fp16u8 kernels that read the result), fp16 in:
//   input [M, N] fp16 row-major, quantized in blocks of K consecutive columns of a row (K = the converter's
//   block_size, 128 here); output [M, N] uint8; scales [M, N / K] fp16
//   s = half(absmax / 127.5) (the scale ROUNDED TO FP16 in __shared__ and stored as is), q = uint8(round(127.5 +
//   x / s)): an OFFSET-BINARY code around 127.5, dequantized as (q - 127.5) * s; round() rounds halves away from 0
//   launch: grid (N / K, M), one block per (block of K, row), blockDim.x = min(K, 1024); absmax by __shfl_xor_sync
//   butterflies, warp leaders to __shared__ float s_warp_reduced[32], warp 0 reduces them and writes the __shared__
//   half s_absmax; thread 0 stores the scale; a second pass re-reads the input and quantizes; int indices, argument
//   order (output, scales, input, M, N, K)
// Fixed: the row was blockIdx.y * blockDim.y (right only because blockDim.y is 1); it is blockIdx.y. An all-zero
// block gave s = 0 and 0 / 0 = NaN cast to uint8 (undefined); such a block now stores q = 128 (round(127.5 + 0)).
// The host asserts K % 32 == 0 (a partial warp would shuffle with inactive lanes and its partial max be dropped by
// the blockDim.x / 32 count) and N % K == 0. The bound holds without a clamp: s is absmax / 127.5 rounded to fp16
// (relative error <= 2^-11), so |x / s| <= 127.57 and 127.5 + x / s stays within [-0.07, 255.07], rounding to 0..255.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cassert>
#include <cstdint>

/* kerntune:
args  = ["output: out u8[M * N]", "scales: out f16[M * N / 128]", "input: in f16[M * N]", "M: i32 = M",
         "N: i32 = N", "K: i32 = 128"]
sizes = [{ M = 8192, N = 4096 }, { M = 4, N = 4096 }, { M = 999, N = 2944 }]
grid  = ["N / 128", "M"]
block = 128
*/
__global__ void quantize_absmax_uint8(uint8_t* output,
                                      half* scales,
                                      half const* __restrict__ input,
                                      int M,
                                      int N,
                                      int K) {
  __shared__ float s_warp_reduced[32];
  __shared__ half s_absmax;
  float absmax_val = 0;
  int row = blockIdx.y;
  int tid = threadIdx.x;
  int lane_id = tid % 32;
  int warp_id = tid / 32;
  bool warp_leader = lane_id == 0;
  int block_count = N / K;
  for (int i = blockIdx.x * K + tid; i < (blockIdx.x + 1) * K; i += blockDim.x) {
    float val = __half2float(input[row * N + i]);
    absmax_val = fmax(absmax_val, fabs(val));
  }
  __syncthreads();
  for (int i = 16; i > 0; i /= 2) {
    absmax_val = fmax(absmax_val, __shfl_xor_sync(~0, absmax_val, i));
  }
  if (warp_leader) {
    s_warp_reduced[warp_id] = absmax_val;
  }
  __syncthreads();
  if (warp_id == 0) {
    absmax_val = lane_id < (blockDim.x / 32) ? s_warp_reduced[lane_id] : 0;
    for (int i = 16; i > 0; i /= 2) {
      absmax_val = fmax(absmax_val, __shfl_xor_sync(~0, absmax_val, i));
    }
    if (warp_leader) {
      s_absmax = absmax_val / 127.5f;
    }
  }
  __syncthreads();
  if (tid == 0) {
    scales[row * block_count + blockIdx.x] = s_absmax;
  }
  float scale = __half2float(s_absmax);
  for (int i = blockIdx.x * K + tid; i < (blockIdx.x + 1) * K; i += blockDim.x) {
    float q = scale > 0.0f ? __half2float(input[row * N + i]) / scale : 0.0f;
    output[row * N + i] = static_cast<uint8_t>(round(127.5f + q));
  }
}

// output: device [h, w] uint8; scales: device [h, w / block_size] fp16; input: device [h, w] fp16.
void quantize_uint8(uint8_t* output, half* scales, half const* input, int h, int w, int block_size,
                    cudaStream_t stream) {
  assert(block_size % 32 == 0 && w % block_size == 0);
  quantize_absmax_uint8<<<dim3(w / block_size, h), std::min(block_size, 1024), 0, stream>>>(output, scales, input, h,
                                                                                            w, block_size);
}
