// Rotary embedding in the style of Tencent ncnn (Tencent/ncnn, src/layer/vulkan/shader/rotaryembed_pack4.comp
// dispatched by RotaryEmbed_vulkan::forward in src/layer/vulkan/rotaryembed_vulkan.cpp; ncnn is Tencent's neural
// network inference framework for mobile and desktop, with a Vulkan GPU back end and a RotaryEmbed layer for its LLM
// pipelines), ported from GLSL to CUDA:
//   an ncnn Mat of the q (or k) projection: w = embed_dim, h = seqlen, c = num_heads, head-major, each channel
//   (head) cstep elements apart (cstep = alignSize(w * h * elemsize, 16) / elemsize); with the Vulkan packing layout
//   the heads come in elempack 4: FOUR HEADS INTERLEAVED in one f16vec4, so the packed Mat is [num_heads / 4][seqlen]
//   [embed_dim] of 4-head vectors, c counting packs;
//   cos_cache and sin_cache [seqlen, embed_dim / 2] (fp16, elempack 1), one row per token of this call (the caller
//   has gathered the rows of the current positions), shared by the 4 heads of a vector;
//   the `interleaved` specialization constant (a template argument here): 0 = NeoX halves (x[i], x[i + half]),
//   1 = GPT-J pairs (x[2i], x[2i + 1]); OUT OF PLACE (top_blob created like bottom_blob).
//   fp16 storage and fp16 arithmetic (ncnn's defaults use_fp16_storage / use_fp16_arithmetic: afp = float16_t):
//   y0 = x0 * cos - x1 * sin, y1 = x0 * sin + x1 * cos per lane in half precision, each product and the sum rounded
//   to fp16 as written (no contraction).
//   One invocation per (pair i, token, head pack); local size (min(64, half), min(4, seqlen), min(4, packs)) as
//   create_pipeline sets it (64 x 4 x 4 = 1024 fits NVIDIA's 1024 invocations, so set_optimal_local_size_xyz keeps
//   it), dispatch ceil(half / 64) x ceil(seqlen / 4) x ceil(packs / 4) workgroups; 32-bit indices as GLSL has them.
// No bug found. Changed: the shape specialization constants / push constants (psc) are kernel arguments; f16vec4
// is a struct of two __half2; only the pack4 shader is ported (the pack1 one, for head counts not divisible by 4, is
// the same with scalar storage); the VkCompute recording became a C++ launcher with device pointers, sizes and a
// stream.
#include <assert.h>
#include <stdint.h>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace ncnn {

struct __align__(8) f16vec4 {
  __half2 rg;
  __half2 ba;
};

/* kerntune:
args  = ["bottom_blob_data: in f16[C * S * 2 * HD * 4]", "cos_cache_data: in f16[S * HD] ~ uniform(-1, 1)",
         "sin_cache_data: in f16[S * HD] ~ uniform(-1, 1)", "top_blob_data: out f16[C * S * 2 * HD * 4]",
         "embed_dim: i32 = 2 * HD", "seqlen: i32 = S", "num_heads: i32 = C", "cstep: i32 = 2 * HD * S"]
sizes = [{ C = 8, S = 8192, HD = 64 }, { C = 8, S = 1, HD = 64 }, { C = 5, S = 1001, HD = 40 }]
grid  = ["cdiv(HD, min(64, HD))", "cdiv(S, min(4, S))", "cdiv(C, min(4, C))"]
block = ["min(64, HD)", "min(4, S)", "min(4, C)"]
template_args = ["0"]
*/
template <int interleaved>
__global__ void rotaryembed_pack4(const f16vec4* bottom_blob_data, const __half* cos_cache_data,
                                  const __half* sin_cache_data, f16vec4* top_blob_data, int embed_dim, int seqlen,
                                  int num_heads, int cstep) {
  const int gx = blockIdx.x * blockDim.x + threadIdx.x;
  const int gy = blockIdx.y * blockDim.y + threadIdx.y;
  const int gz = blockIdx.z * blockDim.z + threadIdx.z;

  const int halfdim = embed_dim / 2;

  if (gx >= halfdim || gy >= seqlen || gz >= num_heads) return;

  const int cache_offset = gy * halfdim + gx;

  const __half2 cosv = __half2half2(cos_cache_data[cache_offset]);
  const __half2 sinv = __half2half2(sin_cache_data[cache_offset]);

  int gi0, gi1;
  if (interleaved == 1) {
    gi0 = gz * cstep + gy * embed_dim + gx * 2;
    gi1 = gi0 + 1;
  } else {
    gi0 = gz * cstep + gy * embed_dim + gx;
    gi1 = gi0 + halfdim;
  }

  const f16vec4 x0 = bottom_blob_data[gi0];
  const f16vec4 x1 = bottom_blob_data[gi1];

  // afpvec4 y0 = x0 * cosv - x1 * sinv; afpvec4 y1 = x0 * sinv + x1 * cosv;
  f16vec4 y0, y1;
  y0.rg = __hsub2(__hmul2_rn(x0.rg, cosv), __hmul2_rn(x1.rg, sinv));
  y0.ba = __hsub2(__hmul2_rn(x0.ba, cosv), __hmul2_rn(x1.ba, sinv));
  y1.rg = __hadd2(__hmul2_rn(x0.rg, sinv), __hmul2_rn(x1.rg, cosv));
  y1.ba = __hadd2(__hmul2_rn(x0.ba, sinv), __hmul2_rn(x1.ba, cosv));

  top_blob_data[gi0] = y0;
  top_blob_data[gi1] = y1;
}

static inline size_t alignSize(size_t sz, int n) { return (sz + n - 1) & -n; }

}  // namespace ncnn

// bottom_blob, top_blob: device packed Mats of [num_heads / 4][seqlen][embed_dim] f16vec4 (num_heads % 4 == 0), each
// pack cstep vectors apart; cos_cache, sin_cache: device [seqlen, embed_dim / 2] fp16.
void rotaryembed_vulkan_forward(const __half* bottom_blob, const __half* cos_cache, const __half* sin_cache,
                                __half* top_blob, int embed_dim, int seqlen, int num_heads, int interleaved,
                                cudaStream_t stream) {
  assert(num_heads % 4 == 0 && embed_dim % 2 == 0);
  const int elempack = 4;
  const size_t elemsize = 2 * elempack;  // fp16 storage
  const int c = num_heads / elempack;    // bottom_blob.c of the packed Mat
  const int cstep = (int)(ncnn::alignSize((size_t)embed_dim * seqlen * elemsize, 16) / elemsize);
  const int halfdim = embed_dim / 2;
  if (halfdim == 0 || seqlen == 0 || c == 0) return;

  // create_pipeline: local_size_xyz for a 3-D shape, kept by set_optimal_local_size_xyz (<= 1024 invocations)
  const dim3 local_size(std::min(64, std::max(1, halfdim)), std::min(4, std::max(1, seqlen)),
                        std::min(4, std::max(1, c)));
  // record_pipeline: dispatcher (w = embed_dim / 2, h = seqlen, c = packs) divided by the local size
  const dim3 group_count((halfdim + local_size.x - 1) / local_size.x, (seqlen + local_size.y - 1) / local_size.y,
                         (c + local_size.z - 1) / local_size.z);
  const ncnn::f16vec4* in = reinterpret_cast<const ncnn::f16vec4*>(bottom_blob);
  ncnn::f16vec4* out = reinterpret_cast<ncnn::f16vec4*>(top_blob);
  if (interleaved == 1) {
    ncnn::rotaryembed_pack4<1><<<group_count, local_size, 0, stream>>>(in, cos_cache, sin_cache, out, embed_dim,
                                                                        seqlen, c, cstep);
  } else {
    ncnn::rotaryembed_pack4<0><<<group_count, local_size, 0, stream>>>(in, cos_cache, sin_cache, out, embed_dim,
                                                                        seqlen, c, cstep);
  }
}
