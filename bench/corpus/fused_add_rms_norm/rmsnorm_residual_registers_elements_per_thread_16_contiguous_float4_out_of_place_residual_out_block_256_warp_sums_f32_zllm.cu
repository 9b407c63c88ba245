// Fused residual add + RMSNorm as the Zllm mini serving engine writes it (Ammar-Alnagar/Zllm, a from-scratch
// vLLM/SGLang-style engine for Qwen: zllm/csrc/kernels/rmsnorm.cu, rmsnorm_residual_kernel<BLOCK_SIZE,
// ELEMENTS_PER_THREAD> next to rmsnorm_optimized_kernel and its rmsnorm_forward_optimized wrapper, namespace
// mini_vllm in the header). fp32 throughout, OUT OF PLACE with two outputs: output = RMSNorm(input + residual) * w
// and residual_out = input + residual, argument order (output, residual_out, input, residual, weight, hidden_dim,
// epsilon). One row per block; each thread owns a CONTIGUOUS chunk of ELEMENTS_PER_THREAD values starting at
// tid * ELEMENTS_PER_THREAD, read as float4 (input and residual), summed into a register array local_values[] and
// squared into a thread sum; the block sum by __shfl_down_sync per warp, lane 0 of each warp into __shared__
// warp_sums[], warp 0 reduces them and lane 0 overwrites warp_sums[0] with rsqrtf(sum / hidden_dim + epsilon);
// the second phase uses the cached register values (no reload of x), reads the weight as float4 and writes both
// outputs as float4. The fused kernel has no wrapper in Zllm; the launcher here is the plain one its
// rmsnorm_forward_optimized uses for the same template: grid num_tokens, (256, 4) up to hidden 1024, (256, 16) up to
// 4096, (512, 16) up to 8192 (spec <256, 16>: every size set has 1024 < hidden <= 4096).
// Fixed: (1) warp_sums was sized by a hard-coded WARPS_PER_BLOCK = 8 ("for 256 threads") while the 512-thread
// configuration has 16 warps (an out-of-bounds shared-memory write): sized by NUM_WARPS = BLOCK_SIZE / WARP_SIZE.
// (2) Columns past BLOCK_SIZE * ELEMENTS_PER_THREAD were silently left unnormalized and a hidden_dim that is not a
// multiple of 4 dropped its last values (the fused kernel has no scalar tail) and made the float4 row loads
// misaligned: the launcher returns false for hidden_dim % 4 != 0 or hidden_dim > 8192.
#include <cuda_runtime.h>
#include <cstdio>

#define WARP_SIZE 32

namespace mini_vllm {

/* kerntune:
args  = ["output: out f32[num_tokens * hidden_dim]", "residual_out: out f32[num_tokens * hidden_dim]",
         "input: in f32[num_tokens * hidden_dim]", "residual: in f32[num_tokens * hidden_dim]",
         "weight: in f32[hidden_dim]", "hidden_dim: i32 = hidden_dim", "epsilon: f32 = 1e-6"]
sizes = [{ num_tokens = 8192, hidden_dim = 4096 }, { num_tokens = 4, hidden_dim = 2048 },
         { num_tokens = 999, hidden_dim = 1500 }]
grid  = "num_tokens"
block = 256
template_args = ["256", "16"]
*/
template <int BLOCK_SIZE, int ELEMENTS_PER_THREAD>
__global__ void rmsnorm_residual_kernel(
    float *__restrict__ output,         // [num_tokens, hidden_dim]
    float *__restrict__ residual_out,   // [num_tokens, hidden_dim], input + residual
    const float *__restrict__ input,    // [num_tokens, hidden_dim]
    const float *__restrict__ residual, // [num_tokens, hidden_dim]
    const float *__restrict__ weight,   // [hidden_dim]
    int hidden_dim, float epsilon) {
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  constexpr int NUM_WARPS = BLOCK_SIZE / WARP_SIZE;
  __shared__ float warp_sums[NUM_WARPS];

  const int lane = tid % WARP_SIZE;
  const int warp_id = tid / WARP_SIZE;

  const float *row_in = input + row * hidden_dim;
  const float *row_res = residual + row * hidden_dim;
  float *row_out = output + row * hidden_dim;
  float *row_res_out = residual_out + row * hidden_dim;

  // this thread's slice of (input + residual), kept in registers
  float local_values[ELEMENTS_PER_THREAD];
  float sum_sq = 0.0f;

#pragma unroll
  for (int i = 0; i < ELEMENTS_PER_THREAD; i += 4) {
    const int col = tid * ELEMENTS_PER_THREAD + i;
    if (col + 3 < hidden_dim) {
      const float4 a = *reinterpret_cast<const float4 *>(&row_in[col]);
      const float4 b = *reinterpret_cast<const float4 *>(&row_res[col]);
      local_values[i + 0] = a.x + b.x;
      local_values[i + 1] = a.y + b.y;
      local_values[i + 2] = a.z + b.z;
      local_values[i + 3] = a.w + b.w;
      sum_sq += local_values[i + 0] * local_values[i + 0] + local_values[i + 1] * local_values[i + 1] +
                local_values[i + 2] * local_values[i + 2] + local_values[i + 3] * local_values[i + 3];
    }
  }

  // warp sums, then warp 0 folds the per-warp partials
#pragma unroll
  for (int delta = WARP_SIZE / 2; delta > 0; delta /= 2) {
    sum_sq += __shfl_down_sync(0xffffffff, sum_sq, delta);
  }
  if (lane == 0) warp_sums[warp_id] = sum_sq;
  __syncthreads();

  if (warp_id == 0) {
    float v = (lane < NUM_WARPS) ? warp_sums[lane] : 0.0f;
#pragma unroll
    for (int delta = WARP_SIZE / 2; delta > 0; delta /= 2) {
      v += __shfl_down_sync(0xffffffff, v, delta);
    }
    if (lane == 0) warp_sums[0] = rsqrtf(v / (float)hidden_dim + epsilon);
  }
  __syncthreads();
  const float rrms = warp_sums[0];

  // normalized output and the updated residual from the cached values
#pragma unroll
  for (int i = 0; i < ELEMENTS_PER_THREAD; i += 4) {
    const int col = tid * ELEMENTS_PER_THREAD + i;
    if (col + 3 < hidden_dim) {
      const float4 w = *reinterpret_cast<const float4 *>(&weight[col]);
      float4 o;
      o.x = local_values[i + 0] * rrms * w.x;
      o.y = local_values[i + 1] * rrms * w.y;
      o.z = local_values[i + 2] * rrms * w.z;
      o.w = local_values[i + 3] * rrms * w.w;
      *reinterpret_cast<float4 *>(&row_out[col]) = o;

      float4 r;
      r.x = local_values[i + 0];
      r.y = local_values[i + 1];
      r.z = local_values[i + 2];
      r.w = local_values[i + 3];
      *reinterpret_cast<float4 *>(&row_res_out[col]) = r;
    }
  }
}

// output, residual_out, input, residual: device [num_tokens, hidden_dim] fp32; weight: [hidden_dim].
// Returns false when no configuration covers hidden_dim.
bool rmsnorm_residual_forward(float *output, float *residual_out, const float *input, const float *residual,
                              const float *weight, int num_tokens, int hidden_dim, float epsilon,
                              cudaStream_t stream) {
  if (hidden_dim % 4 != 0 || hidden_dim > 8192) return false;

  dim3 grid(num_tokens);
  if (hidden_dim <= 1024) {
    constexpr int BLOCK_SIZE = 256;
    constexpr int ELEMENTS_PER_THREAD = 4;
    rmsnorm_residual_kernel<BLOCK_SIZE, ELEMENTS_PER_THREAD><<<grid, dim3(BLOCK_SIZE), 0, stream>>>(
        output, residual_out, input, residual, weight, hidden_dim, epsilon);
  } else if (hidden_dim <= 4096) {
    constexpr int BLOCK_SIZE = 256;
    constexpr int ELEMENTS_PER_THREAD = 16;
    rmsnorm_residual_kernel<BLOCK_SIZE, ELEMENTS_PER_THREAD><<<grid, dim3(BLOCK_SIZE), 0, stream>>>(
        output, residual_out, input, residual, weight, hidden_dim, epsilon);
  } else {
    constexpr int BLOCK_SIZE = 512;
    constexpr int ELEMENTS_PER_THREAD = 16;
    rmsnorm_residual_kernel<BLOCK_SIZE, ELEMENTS_PER_THREAD><<<grid, dim3(BLOCK_SIZE), 0, stream>>>(
        output, residual_out, input, residual, weight, hidden_dim, epsilon);
  }

  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    fprintf(stderr, "CUDA error %d in rmsnorm_residual_forward\n", (int)err);
    return false;
  }
  return true;
}

}  // namespace mini_vllm
