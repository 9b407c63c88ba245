// RMSNorm the way TVM / MLC-LLM compile it: a kernel emitted by TVM's CUDA code generator for one model (Llama-2-7B,
// hidden size 4096 baked in as literals) with only the token count n dynamic (an int64 shape variable passed last).
// The style is generated code: extern "C", __launch_bounds__, no const, buffers named after the TIR (A the input,
// B the weight, rms_norm the output), every index spelled out with (int) / (int64_t) casts, per-thread accumulators
// as one-element arrays, 8-byte vectorized accesses (uint2 holding four halves, read through half2 casts), and the
// cross-thread reduction as TVM lowers it: shuffle-down within each warp into red_buf0, the 8 warp partials through
// shared memory, a second shuffle stage in warp 0, the total broadcast through shared memory.
// Numerics as in the TIR: fp32 throughout, mean = sum * 2.441406e-04f (1/4096 printed as TVM prints float
// immediates, six digits), out = half(float(B) * (float(A) / sqrtf(mean + 1e-05f))), eps a literal.
// One token per block of 256 threads, 16 elements per thread (4 x uint2); A is read twice (sum, then output).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["A: in f16[n * 4096]", "B: in f16[4096]", "rms_norm: out f16[n * 4096]", "n: i64 = n"]
sizes = [{ n = 8192 }, { n = 4 }, { n = 1001 }]
grid  = "n"
block = 256
*/
extern "C" __global__ void __launch_bounds__(256) rms_norm_kernel(half* __restrict__ A, half* __restrict__ B,
                                                                  half* __restrict__ rms_norm, int64_t n) {
  float Ared_temp_local[1];
  __shared__ float red_buf0[8];
  float red_buf0_1[1];
  uint mask[1];
  float t0[1];
  Ared_temp_local[0] = 0.000000e+00f;
  for (int k_0 = 0; k_0 < 4; ++k_0) {
    uint2 A_v = *(uint2*)(A + ((((int64_t)blockIdx.x) * (int64_t)4096) +
                               ((int64_t)((k_0 * 1024) + (((int)threadIdx.x) * 4)))));
    float2 A_f0 = __half22float2(*(half2*)(&(A_v.x)));
    float2 A_f1 = __half22float2(*(half2*)(&(A_v.y)));
    Ared_temp_local[0] = (Ared_temp_local[0] + (A_f0.x * A_f0.x));
    Ared_temp_local[0] = (Ared_temp_local[0] + (A_f0.y * A_f0.y));
    Ared_temp_local[0] = (Ared_temp_local[0] + (A_f1.x * A_f1.x));
    Ared_temp_local[0] = (Ared_temp_local[0] + (A_f1.y * A_f1.y));
  }
  red_buf0_1[0] = Ared_temp_local[0];
  mask[0] = 0xffffffffu;
  t0[0] = __shfl_down_sync(mask[0], red_buf0_1[0], 16, 32);
  red_buf0_1[0] = (red_buf0_1[0] + t0[0]);
  t0[0] = __shfl_down_sync(mask[0], red_buf0_1[0], 8, 32);
  red_buf0_1[0] = (red_buf0_1[0] + t0[0]);
  t0[0] = __shfl_down_sync(mask[0], red_buf0_1[0], 4, 32);
  red_buf0_1[0] = (red_buf0_1[0] + t0[0]);
  t0[0] = __shfl_down_sync(mask[0], red_buf0_1[0], 2, 32);
  red_buf0_1[0] = (red_buf0_1[0] + t0[0]);
  t0[0] = __shfl_down_sync(mask[0], red_buf0_1[0], 1, 32);
  red_buf0_1[0] = (red_buf0_1[0] + t0[0]);
  if ((((int)threadIdx.x) % 32) == 0) {
    red_buf0[(((int)threadIdx.x) >> 5)] = red_buf0_1[0];
  }
  __syncthreads();
  if (((int)threadIdx.x) < 32) {
    red_buf0_1[0] = ((((int)threadIdx.x) < 8) ? red_buf0[((int)threadIdx.x)] : 0.000000e+00f);
    t0[0] = __shfl_down_sync(mask[0], red_buf0_1[0], 4, 32);
    red_buf0_1[0] = (red_buf0_1[0] + t0[0]);
    t0[0] = __shfl_down_sync(mask[0], red_buf0_1[0], 2, 32);
    red_buf0_1[0] = (red_buf0_1[0] + t0[0]);
    t0[0] = __shfl_down_sync(mask[0], red_buf0_1[0], 1, 32);
    red_buf0_1[0] = (red_buf0_1[0] + t0[0]);
    if (((int)threadIdx.x) == 0) {
      red_buf0[0] = red_buf0_1[0];
    }
  }
  __syncthreads();
  red_buf0_1[0] = red_buf0[0];
  for (int k_0_1 = 0; k_0_1 < 4; ++k_0_1) {
    uint2 A_v_1 = *(uint2*)(A + ((((int64_t)blockIdx.x) * (int64_t)4096) +
                                 ((int64_t)((k_0_1 * 1024) + (((int)threadIdx.x) * 4)))));
    uint2 B_v = *(uint2*)(B + ((k_0_1 * 1024) + (((int)threadIdx.x) * 4)));
    uint2 rms_norm_v;
    float2 a0 = __half22float2(*(half2*)(&(A_v_1.x)));
    float2 a1 = __half22float2(*(half2*)(&(A_v_1.y)));
    float2 b0 = __half22float2(*(half2*)(&(B_v.x)));
    float2 b1 = __half22float2(*(half2*)(&(B_v.y)));
    ((half2*)(&(rms_norm_v.x)))->x =
        ((half)(b0.x * (a0.x / sqrtf(((red_buf0_1[0] * 2.441406e-04f) + 1.000000e-05f)))));
    ((half2*)(&(rms_norm_v.x)))->y =
        ((half)(b0.y * (a0.y / sqrtf(((red_buf0_1[0] * 2.441406e-04f) + 1.000000e-05f)))));
    ((half2*)(&(rms_norm_v.y)))->x =
        ((half)(b1.x * (a1.x / sqrtf(((red_buf0_1[0] * 2.441406e-04f) + 1.000000e-05f)))));
    ((half2*)(&(rms_norm_v.y)))->y =
        ((half)(b1.y * (a1.y / sqrtf(((red_buf0_1[0] * 2.441406e-04f) + 1.000000e-05f)))));
    *(uint2*)(rms_norm + ((((int64_t)blockIdx.x) * (int64_t)4096) +
                          ((int64_t)((k_0_1 * 1024) + (((int)threadIdx.x) * 4))))) = rms_norm_v;
  }
}

// What the TVM runtime's launch of the packed function amounts to: A, rms_norm [n, 4096] fp16, B [4096] fp16,
// device pointers; one block per token.
void rms_norm_launch(half* A, half* B, half* rms_norm, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dim3 grid((unsigned)n, 1, 1);
  dim3 block(256, 1, 1);
  rms_norm_kernel<<<grid, block, 0, stream>>>(A, B, rms_norm, n);
}
