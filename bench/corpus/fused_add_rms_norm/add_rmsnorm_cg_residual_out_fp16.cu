// Fused residual add + RMSNorm (fp16), out of place in the TensorRT-LLM "residual out" style: the branch output x
// and the residual stream are both read-only, the sum goes to a separate residual_out buffer (rounded to fp16, the
// next layer's residual) and the normalized row to out:
//   residual_out = fp16(x + residual)
//   out          = fp16(residual_out * rsqrt(mean(residual_out^2) + eps) * gamma)
// with fp32 arithmetic and the rounded sum normalized. The block is written with cooperative groups: the block
// handle from cg::this_thread_block(), its warps from cg::tiled_partition<32>, each warp's partial sum of squares
// by cg::reduce(warp, v, cg::plus<float>()), the warp partials through a small __shared__ array and block.sync(),
// then every warp reduces the partials again so that each thread holds the total (no broadcast variable).
// One token per block; rows are read 16 bytes (8 halves) at a time through float4 when hidden % 8 == 0 (every
// row then starts 16-byte aligned), else the kernel takes a scalar path. The host sizes the block for the packs:
// min(1024, round_up(ceil(hidden / 8), 32)) threads; the scalar path strides the row by the block.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <algorithm>
#include <cstdint>

namespace cg = cooperative_groups;

namespace kernels {

constexpr int kHalfsPerVec = 8;  // halves in one float4
constexpr int kMaxThreads = 1024;

// Sum of v over the block; every thread gets the total. The block is a whole number of warps (the launcher rounds
// it up to 32 threads), at most 32 of them. Called once per kernel, so the partials are never overwritten early.
__device__ __forceinline__ float block_all_reduce_sum(const cg::thread_block& block, float v) {
  __shared__ float warp_partials[kMaxThreads / 32];
  const cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  v = cg::reduce(warp, v, cg::plus<float>());
  if (warp.thread_rank() == 0) warp_partials[warp.meta_group_rank()] = v;
  block.sync();
  v = warp.thread_rank() < warp.meta_group_size() ? warp_partials[warp.thread_rank()] : 0.0f;
  return cg::reduce(warp, v, cg::plus<float>());
}

/* kerntune:
args  = ["out: out f16[tokens * hidden]", "residual_out: out f16[tokens * hidden]", "x: in f16[tokens * hidden]",
         "residual: in f16[tokens * hidden]", "gamma: in f16[hidden]", "eps: f32 = 1e-6", "tokens: i32 = tokens",
         "hidden: i32 = hidden"]
sizes = [{ tokens = 4096, hidden = 4096 }, { tokens = 8, hidden = 7168 }, { tokens = 577, hidden = 3075 }]
grid  = "tokens"
block = "min(1024, round_up(cdiv(hidden, 8), 32))"
*/
__global__ void add_rmsnorm_residual_out_kernel(__half* __restrict__ out, __half* __restrict__ residual_out,
                                                const __half* __restrict__ x, const __half* __restrict__ residual,
                                                const __half* __restrict__ gamma, const float eps, const int tokens,
                                                const int hidden) {
  cg::thread_block block = cg::this_thread_block();
  const int tid = static_cast<int>(block.thread_rank());
  const int num_threads = static_cast<int>(block.size());
  const int64_t row_offset = static_cast<int64_t>(blockIdx.x) * hidden;
  const bool use_vec = (hidden % kHalfsPerVec) == 0;  // the same for the whole block

  // pass 1: residual_out = fp16(x + residual); sum of squares of the rounded values
  float sum_sq = 0.0f;
  if (use_vec) {
    const int num_vecs = hidden / kHalfsPerVec;
    const float4* x_vec = reinterpret_cast<const float4*>(x + row_offset);
    const float4* r_vec = reinterpret_cast<const float4*>(residual + row_offset);
    float4* ro_vec = reinterpret_cast<float4*>(residual_out + row_offset);
    for (int i = tid; i < num_vecs; i += num_threads) {
      const float4 xv = x_vec[i];
      const float4 rv = r_vec[i];
      float4 sv;
      const __half2* x2 = reinterpret_cast<const __half2*>(&xv);
      const __half2* r2 = reinterpret_cast<const __half2*>(&rv);
      __half2* s2 = reinterpret_cast<__half2*>(&sv);
#pragma unroll
      for (int k = 0; k < kHalfsPerVec / 2; ++k) {
        const float2 a = __half22float2(x2[k]);
        const float2 b = __half22float2(r2[k]);
        s2[k] = __floats2half2_rn(a.x + b.x, a.y + b.y);
        const float2 s = __half22float2(s2[k]);
        sum_sq += s.x * s.x + s.y * s.y;
      }
      ro_vec[i] = sv;
    }
  } else {
    for (int i = tid; i < hidden; i += num_threads) {
      const __half s = __float2half_rn(__half2float(x[row_offset + i]) + __half2float(residual[row_offset + i]));
      residual_out[row_offset + i] = s;
      const float f = __half2float(s);
      sum_sq += f * f;
    }
  }

  const float total = block_all_reduce_sum(block, sum_sq);
  const float inv_rms = rsqrtf(total / static_cast<float>(hidden) + eps);

  // pass 2: each thread re-reads the residual_out elements it wrote itself in pass 1 (same index mapping)
  if (use_vec) {
    const int num_vecs = hidden / kHalfsPerVec;
    const float4* ro_vec = reinterpret_cast<const float4*>(residual_out + row_offset);
    const float4* g_vec = reinterpret_cast<const float4*>(gamma);
    float4* o_vec = reinterpret_cast<float4*>(out + row_offset);
    for (int i = tid; i < num_vecs; i += num_threads) {
      const float4 sv = ro_vec[i];
      const float4 gv = g_vec[i];
      float4 ov;
      const __half2* s2 = reinterpret_cast<const __half2*>(&sv);
      const __half2* g2 = reinterpret_cast<const __half2*>(&gv);
      __half2* o2 = reinterpret_cast<__half2*>(&ov);
#pragma unroll
      for (int k = 0; k < kHalfsPerVec / 2; ++k) {
        const float2 s = __half22float2(s2[k]);
        const float2 g = __half22float2(g2[k]);
        o2[k] = __floats2half2_rn(s.x * inv_rms * g.x, s.y * inv_rms * g.y);
      }
      o_vec[i] = ov;
    }
  } else {
    for (int i = tid; i < hidden; i += num_threads) {
      const float s = __half2float(residual_out[row_offset + i]);
      out[row_offset + i] = __float2half_rn(s * inv_rms * __half2float(gamma[i]));
    }
  }
}

}  // namespace kernels

// out, residual_out, x, residual: [tokens, hidden] contiguous; gamma: [hidden]. x and residual are not modified.
void invokeAddRmsNormResidualOut(__half* out, __half* residual_out, const __half* x, const __half* residual,
                                 const __half* gamma, const float eps, const int tokens, const int hidden,
                                 cudaStream_t stream) {
  // one thread per 8-half pack, whole warps, at most 1024 threads
  const int packs = (hidden + kernels::kHalfsPerVec - 1) / kernels::kHalfsPerVec;
  dim3 block(std::min(kernels::kMaxThreads, (packs + 31) / 32 * 32));
  dim3 grid(tokens);
  kernels::add_rmsnorm_residual_out_kernel<<<grid, block, 0, stream>>>(out, residual_out, x, residual, gamma, eps,
                                                                       tokens, hidden);
}
