// Context-parallel (ring attention) forward output correction as NVIDIA Transformer Engine writes it
// (transformer_engine/common/fused_attn/context_parallel.cu, the out_correction helper of fused_out_correction /
// the per-step correction Megatron-core's AttnFuncWithCPAndKVP2P applies after each ring step): after all cp_size
// steps, lse [b, h, s] (BHS, fp32, natural log) already holds the corrected total log-sum-exp, and the output is
// accumulated IN PLACE one step at a time:
//   out += out_per_step * exp(lse_per_step - lse)
// each step's partial output out_per_step [b, s, h, d] (BSHD, same dtype as out) being normalized by its own lse.
// TE's idioms: one thread per int4 (ldg128, sizeof(int4) / sizeof(dtype) = 8 bf16) over a flat tid, the int4 index
// mapped back to (b, s, h) with integer divisions by the head dim counted in int4s (build_mapping_bshd's
// `index / shd_size`, `index / hd_size % s_size`, `index / d_size % h_size`), the lse index b * (h * s) + h * s + s,
// the int4 reinterpreted as dtype* and each lane updated as static_cast<float>(p_out[i]) +
// static_cast<float>(p_per_step[i]) * lse_corrected (the float result rounded back to bf16 by the assignment),
// exp() (double-precision overload resolution on a float argument picks expf), a 256-thread block and
// num_blocks = ceil(total_threads / 256), an early return past the last int4. The host checks that the head dim
// is a multiple of 8 and launches one kernel per ring step (this file: one step; the fused TE kernel walks a
// TensorList of up to 64 step pointers, which a spec cannot express).
// lse and lse_per_step uniform(-4, 12).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdexcept>

namespace transformer_engine {
namespace context_parallel {

template <typename dtype>
__device__ __forceinline__ void out_correction(int4 *out, int4 out_per_step, float lse, float lse_per_step) {
  dtype *p_out = reinterpret_cast<dtype *>(out);
  dtype *p_out_per_step = reinterpret_cast<dtype *>(&out_per_step);
  float lse_corrected = exp(lse_per_step - lse);
  for (int i = 0; i < sizeof(int4) / sizeof(dtype); i++) {
    p_out[i] = static_cast<float>(p_out[i]) + static_cast<float>(p_out_per_step[i]) * lse_corrected;
  }
}

/* kerntune:
args  = ["out: inout bf16[b * s * h * d]", "out_per_step: in bf16[b * s * h * d]",
         "lse: in f32[b * h * s] ~ uniform(-4, 12)", "lse_per_step: in f32[b * h * s] ~ uniform(-4, 12)",
         "batch: i32 = b", "num_heads: i32 = h", "dim_per_head: i32 = d", "seqlen: i32 = s"]
sizes = [{ b = 2, s = 4096, h = 32, d = 128 }, { b = 8, s = 1, h = 32, d = 128 },
         { b = 3, s = 333, h = 7, d = 128 }]
grid  = "cdiv(b * s * h * d / 8, 256)"
block = 256
template_args = ["__nv_bfloat16"]
*/
template <typename dtype>
__global__ void out_correction_bshd_kernel(dtype *out, dtype *out_per_step, float *lse, float *lse_per_step,
                                           int batch, int num_heads, int dim_per_head, int seqlen) {
  constexpr int elems_per_thread = sizeof(int4) / sizeof(dtype);
  int threads_per_token = num_heads * dim_per_head / elems_per_thread;
  int tid = blockIdx.x * blockDim.x + threadIdx.x;

  if (tid / threads_per_token >= batch * seqlen) {
    return;
  }

  // build_mapping_bshd with d counted in int4s
  int d_size = dim_per_head / elems_per_thread;
  int hd_size = num_heads * d_size;
  int shd_size = seqlen * hd_size;
  int b = tid / shd_size;
  int s = tid / hd_size % seqlen;
  int h = tid / d_size % num_heads;
  int lse_idx = b * (num_heads * seqlen) + h * seqlen + s;  // lse is in BHS format

  int4 out_buffer = reinterpret_cast<int4 *>(out)[tid];
  int4 out_per_step_buffer = reinterpret_cast<int4 *>(out_per_step)[tid];
  out_correction<dtype>(&out_buffer, out_per_step_buffer, lse[lse_idx], lse_per_step[lse_idx]);
  reinterpret_cast<int4 *>(out)[tid] = out_buffer;
}

// out, out_per_step: [b, s, h, d]; lse, lse_per_step: [b, h, s] fp32. One ring step's correction, in place on out.
template <typename dtype>
void out_correction_bshd(dtype *out, dtype *out_per_step, float *lse, float *lse_per_step, int batch,
                         int seqlen, int num_heads, int dim_per_head, cudaStream_t stream) {
  int elems_per_thread = sizeof(int4) / sizeof(dtype);  // Using ldg128
  if (dim_per_head % elems_per_thread != 0) throw std::runtime_error("Unsupported head size.");
  int threads_per_block = 256;
  int total_threads = batch * seqlen * num_heads * dim_per_head / elems_per_thread;
  int num_blocks = (total_threads + threads_per_block - 1) / threads_per_block;
  out_correction_bshd_kernel<dtype><<<num_blocks, threads_per_block, 0, stream>>>(
      out, out_per_step, lse, lse_per_step, batch, num_heads, dim_per_head, seqlen);
}

template void out_correction_bshd<__nv_bfloat16>(__nv_bfloat16 *, __nv_bfloat16 *, float *, float *, int, int, int,
                                                 int, cudaStream_t);

}  // namespace context_parallel
}  // namespace transformer_engine
