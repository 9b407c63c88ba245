// LayerNorm with bias, activation, scaled residual (skip) in the style of Leela Chess Zero (lc0,
// src/neural/backends/cuda/common_kernels.cu: layer_norm_kernel<T> behind LayerNorm(), used after every
// attention / FFN dense layer of the transformer ("BT") networks), half instantiation:
//   input [N, C] is the output of a dense layer WITHOUT its bias; the kernel adds bias [C], applies the layer's
//   activation, scales by alpha and adds the skip connection [N, C]:  v = act(input + bias) * alpha + skip,
//   then output = (v - mean) / sqrt(var + ep) * gammas + betas; N = batch * 64 squares, C the embedding size
//   argument order N, C, output, input, bias, skip, gammas, betas, ep, alpha, act; non-const output
//   each thread owns 16 CONSECUTIVE elements of a row (c = (threadIdx.y * 32 + threadIdx.x) * 16), moved as
//   uint4 (copyAs<uint4>: two 16-byte copies of 8 halves, or four of 4 floats) into float registers
//   block (32, ceil(C / 16 / 32), rows per block z = min(max(512 / (32 * y), 1), N)), grid ceil(N / z): a row is
//   the (x, y) plane of one z slice; sums go through warpReduce, then one __shared__ partial per (z, y) warp
//   summed serially by the thread (0, 0, z) (shared_sum_for_layer_norm), mean and variance in two reductions
//   over the registers (two-pass variance), d / sqrt(var + ep) (a division by sqrt, not rsqrt), float math,
//   one rounding at the store; the launcher refuses C % 16 != 0 or C > 16384
//   act is ActivationFunction in lc0; passed here as its int value (ACTIVATION_NONE = 0 for the encoder FFN)
// Fixed: (1) the kernel returned for rows n >= N before the barriers of shared_sum_for_layer_norm, so the last
// block of a grid with N % z != 0 reached __syncthreads() with only part of its threads; out-of-range rows now
// stay in the block as idle threads (no loads, no stores). (2) The __shared__ partials were [16][16] while
// blockDim.y reaches 32 for 8192 < C <= 16384 (which the launcher accepts): now [16][32].
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <type_traits>

namespace lczero {
namespace cudnn_backend {

enum ActivationFunction {
  ACTIVATION_NONE = 0,
  ACTIVATION_RELU = 1,
  ACTIVATION_TANH = 2,
  ACTIVATION_SIGMOID = 3,
  ACTIVATION_SELU = 4,
  ACTIVATION_MISH = 5,
  ACTIVATION_SWISH = 6,
  ACTIVATION_RELU_2 = 7,
};

inline int DivUp(int a, int b) { return (a + b - 1) / b; }

// Copy sizeof(CopyType) bytes from src to dst through one wide access.
template <typename CopyType>
__device__ __forceinline__ void copyAs(void* dst, const void* src) {
  *((CopyType*)(dst)) = *((const CopyType*)(src));
}

__device__ __forceinline__ float warpReduce(float x) {
  for (int mask = 16; mask > 0; mask >>= 1) x += __shfl_xor_sync(0xFFFFFFFF, x, mask);
  return x;
}

__device__ __forceinline__ float mishActivate(float el) {
  float e = __expf(el);
  float n = e * e + 2.0f * e;
  float d = el / (n + 2.0f);
  return (el <= -0.6f) ? n * d : el - 2.0f * d;
}

__device__ __forceinline__ float activate(float cVal, int activation) {
  switch (activation) {
    case ACTIVATION_RELU:
      if (cVal < 0) cVal = 0;
      break;
    case ACTIVATION_RELU_2:
      if (cVal < 0) cVal = 0;
      cVal *= cVal;
      break;
    case ACTIVATION_TANH:
      cVal = tanhf(cVal);
      break;
    case ACTIVATION_SIGMOID:
      cVal = 1.0f / (1.0f + __expf(-cVal));
      break;
    case ACTIVATION_SELU: {
      float alpha = 1.67326324f, scale = 1.05070098f;
      if (cVal > 0)
        cVal = scale * cVal;
      else
        cVal = scale * alpha * (__expf(cVal) - 1.0f);
      break;
    }
    case ACTIVATION_MISH:
      cVal = mishActivate(cVal);
      break;
    case ACTIVATION_SWISH:
      cVal = cVal / (1.0f + __expf(-cVal));
      break;
    case ACTIVATION_NONE:
    default:
      break;
  }
  return cVal;
}

__device__ __forceinline__ float shared_sum_for_layer_norm(float x) {
  // compute warp-wide sum
  float s = warpReduce(x);

  // one warp-wide partial per (row z, warp y); blockDim.z <= 16 and blockDim.y <= 32 (C <= 16384)
  __shared__ float sum[16][32];

  // compute sum across C dimension using the warp wide partial sums
  if (threadIdx.x == 0) sum[threadIdx.z][threadIdx.y] = s;
  __syncthreads();

  if (threadIdx.x == 0 && threadIdx.y == 0) {
    float cSum = 0;
    for (int j = 0; j < blockDim.y; j++) cSum += sum[threadIdx.z][j];
    sum[threadIdx.z][0] = cSum;
  }
  __syncthreads();

  // s now contains the sum across C dimension
  float r = sum[threadIdx.z][0];
  __syncthreads();  // the next call overwrites sum[z][0]
  return r;
}

// N * C tensors, each thread processes 16 elements
// 1. bias add, activation, alpha scale and skip add
// 2. layer norm across the C dimension
/* kerntune:
args  = ["N: i32 = N", "C: i32 = C", "output: out f16[N * C]", "input: in f16[N * C]", "bias: in f16[C]",
         "skip: in f16[N * C]", "gammas: in f16[C]", "betas: in f16[C]", "ep: f32 = 1e-6", "alpha: f32 = 1.0",
         "act: i32 = 0"]
sizes = [{ N = 16384, C = 1024 }, { N = 64, C = 768 }, { N = 1001, C = 1008 }]
grid  = "cdiv(N, min(max(512 / (32 * cdiv(C / 16, 32)), 1), N))"
block = [32, "cdiv(C / 16, 32)", "min(max(512 / (32 * cdiv(C / 16, 32)), 1), N)"]
template_args = ["half"]
*/
template <typename T>
__global__ void layer_norm_kernel(int N, int C, T* output, const T* input, const T* bias, const T* skip,
                                  const T* gammas, const T* betas, float ep, float alpha, int act) {
  int n = blockIdx.x * blockDim.z + threadIdx.z;
  int c = (threadIdx.y * 32 + threadIdx.x) * 16;
  // rows past N stay for the barriers below (the original returned here)
  bool oobThread = n >= N || c >= C;

  int biasIndex = c;
  int tensorIndex = n * C + c;

  float val[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  float oth[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

  const bool fp16 = std::is_same<half, T>::value;
  if (!oobThread) {
    // Load from memory (16 elements a time)
    if (fp16) {
      half inp[8];
      copyAs<uint4>(&inp[0], &input[tensorIndex]);
      for (int i = 0; i < 8; i++) val[i] = (float)inp[i];
      copyAs<uint4>(&inp[0], &input[tensorIndex + 8]);
      for (int i = 0; i < 8; i++) val[i + 8] = (float)inp[i];
      copyAs<uint4>(&inp[0], &bias[biasIndex]);
      for (int i = 0; i < 8; i++) oth[i] = (float)inp[i];
      copyAs<uint4>(&inp[0], &bias[biasIndex + 8]);
      for (int i = 0; i < 8; i++) oth[i + 8] = (float)inp[i];
      for (int i = 0; i < 16; i++) val[i] += oth[i];
    } else {
      copyAs<uint4>(&val[0], &input[tensorIndex]);
      copyAs<uint4>(&val[4], &input[tensorIndex + 4]);
      copyAs<uint4>(&val[8], &input[tensorIndex + 8]);
      copyAs<uint4>(&val[12], &input[tensorIndex + 12]);
      copyAs<uint4>(&oth[0], &bias[biasIndex]);
      copyAs<uint4>(&oth[4], &bias[biasIndex + 4]);
      copyAs<uint4>(&oth[8], &bias[biasIndex + 8]);
      copyAs<uint4>(&oth[12], &bias[biasIndex + 12]);
      for (int i = 0; i < 16; i++) val[i] += oth[i];
    }
  }

  if (!oobThread && skip != nullptr) {
    if (fp16) {
      half inp[8];
      copyAs<uint4>(&inp[0], &skip[tensorIndex]);
      for (int i = 0; i < 8; i++) oth[i] = (float)inp[i];
      copyAs<uint4>(&inp[0], &skip[tensorIndex + 8]);
      for (int i = 0; i < 8; i++) oth[i + 8] = (float)inp[i];
    } else {
      copyAs<uint4>(&oth[0], &skip[tensorIndex]);
      copyAs<uint4>(&oth[4], &skip[tensorIndex + 4]);
      copyAs<uint4>(&oth[8], &skip[tensorIndex + 8]);
      copyAs<uint4>(&oth[12], &skip[tensorIndex + 12]);
    }
  }

  // 1. Compute mean
  float s = 0;
  if (!oobThread) {
    if (skip != nullptr) {
      for (int i = 0; i < 16; i++) {
        val[i] = activate(val[i], act) * alpha + oth[i];
        s += val[i];
      }
    } else {
      for (int i = 0; i < 16; i++) {
        val[i] = activate(val[i], act) * alpha;
        s += val[i];
      }
    }
  }

  s = shared_sum_for_layer_norm(s);
  float mean = s / C;

  // 2. Compute variance
  s = 0;
  if (!oobThread)
    for (int i = 0; i < 16; i++) {
      float d = val[i] - mean;
      float d_sq = d * d;
      s += d_sq;
    }
  s = shared_sum_for_layer_norm(s);
  float var = s / C;

  if (oobThread) return;  // no barrier below

  if (fp16) {
    half inp[8];
    copyAs<uint4>(&inp[0], &gammas[biasIndex]);
    for (int i = 0; i < 8; i++) oth[i] = (float)inp[i];
    copyAs<uint4>(&inp[0], &gammas[biasIndex + 8]);
    for (int i = 0; i < 8; i++) oth[i + 8] = (float)inp[i];
  } else {
    copyAs<uint4>(&oth[0], &gammas[biasIndex]);
    copyAs<uint4>(&oth[4], &gammas[biasIndex + 4]);
    copyAs<uint4>(&oth[8], &gammas[biasIndex + 8]);
    copyAs<uint4>(&oth[12], &gammas[biasIndex + 12]);
  }

  // 3. Normalize
  for (int i = 0; i < 16; i++) {
    float d = val[i] - mean;
    float norm = d / sqrt(var + ep);
    float op = norm * oth[i];
    val[i] = op;
  }

  if (fp16) {
    half inp[8];
    copyAs<uint4>(&inp[0], &betas[biasIndex]);
    for (int i = 0; i < 8; i++) oth[i] = (float)inp[i];
    copyAs<uint4>(&inp[0], &betas[biasIndex + 8]);
    for (int i = 0; i < 8; i++) oth[i + 8] = (float)inp[i];
  } else {
    copyAs<uint4>(&oth[0], &betas[biasIndex]);
    copyAs<uint4>(&oth[4], &betas[biasIndex + 4]);
    copyAs<uint4>(&oth[8], &betas[biasIndex + 8]);
    copyAs<uint4>(&oth[12], &betas[biasIndex + 12]);
  }

  for (int i = 0; i < 16; i++) {
    val[i] += oth[i];
  }

  // Write to memory
  if (fp16) {
    half op[8];
    for (int i = 0; i < 8; i++) op[i] = (half)val[i];
    copyAs<uint4>(&output[tensorIndex], &op[0]);
    for (int i = 0; i < 8; i++) op[i] = (half)val[i + 8];
    copyAs<uint4>(&output[tensorIndex + 8], &op[0]);
  } else {
    copyAs<uint4>(&output[tensorIndex], &val[0]);
    copyAs<uint4>(&output[tensorIndex + 4], &val[4]);
    copyAs<uint4>(&output[tensorIndex + 8], &val[8]);
    copyAs<uint4>(&output[tensorIndex + 12], &val[12]);
  }
}

// add (optional) skip connection to input, and then perform Layer normalization
// normalization is done across C dimension (i.e, sums and std deviations taken over elements in C dim)
template <typename T>
void LayerNorm(int N, int C, T* output, const T* input, const T* bias, const T* skip, const T* gammas,
               const T* betas, float ep, float alpha, ActivationFunction act, cudaStream_t stream) {
  // process 16 elements per thread to achieve close to peak memory bandwidth
  if (C % 16 != 0) throw std::runtime_error("unsupported filter size");
  if (C > 16384) throw std::runtime_error("unsupported filter size");

  dim3 blockDim, gridDim;
  blockDim.x = 32;
  blockDim.y = DivUp(C / 16, 32);
  blockDim.z = std::min(std::max(512 / (blockDim.x * blockDim.y), 1u), (unsigned int)N);
  gridDim.x = DivUp(N, blockDim.z);
  gridDim.y = 1;
  gridDim.z = 1;

  layer_norm_kernel<T><<<gridDim, blockDim, 0, stream>>>(N, C, output, input, bias, skip, gammas, betas, ep,
                                                           alpha, (int)act);
}

template void LayerNorm<half>(int N, int C, half* output, const half* input, const half* bias, const half* skip,
                              const half* gammas, const half* betas, float ep, float alpha,
                              ActivationFunction act, cudaStream_t stream);

}  // namespace cudnn_backend
}  // namespace lczero
