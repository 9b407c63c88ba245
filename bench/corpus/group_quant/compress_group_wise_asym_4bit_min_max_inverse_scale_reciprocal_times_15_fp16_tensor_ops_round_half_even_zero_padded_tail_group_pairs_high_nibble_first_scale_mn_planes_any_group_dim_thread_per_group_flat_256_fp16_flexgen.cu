// Group-wise 4-bit compression of weights and KV cache in the style of FlexGen (FMInference/FlexLLMGen, formerly
// FlexGen: flexgen/compression.py TorchCompressedDevice.compress, run for every weight when the policy compresses
// weights (CompressionConfig(num_bits=4, group_size=64, group_dim=0, symmetric=False)) and for every KV-cache store
// (group_size=64, group_dim=2) of flex_opt.py; FlexGen is the offloading engine for high-throughput OPT inference
// on one GPU), written as the one CUDA kernel its sequence of fp16 torch ops amounts to:
//   The fp16 tensor is viewed as [outer, dim, inner] around its group dimension (outer = prod(shape[:group_dim]),
//   dim = shape[group_dim], inner = prod(shape[group_dim + 1:])): groups of group_size CONSECUTIVE INDICES ALONG THE
//   GROUP DIM, i.e. elements `inner` apart (a column segment of 64 output rows for an (out, in) weight with
//   group_dim 0; 64 contiguous channels of a head for the (seq, batch * heads, head_dim) cache with group_dim 2).
//   dim is padded with ZEROS to a multiple of group_size and the zeros take part in the tail group's min and max.
//   Asymmetric: mn = min, mx = max over the group; scale = B / (mx - mn) with B = 15 is the INVERSE step, computed
//   as torch does `int / tensor` (reciprocal rounded to fp16, then times 15 rounded to fp16); q = round((x - mn) *
//   scale) clamped to [0, 15], every step an fp16 tensor op (computed in fp32, rounded to fp16 after each op:
//   sub, mul), round half to even, to uint8. Packing along the group: element 2p in the HIGH nibble, 2p + 1 in the
//   low one (bitwise_or(left << 4, right)); data [outer, num_groups * group_size / 2, inner] uint8; scale [outer,
//   num_groups, 2, inner] fp16 holding the planes (scale, mn) of each group (torch.cat([scale, mn], group_dim + 1)).
//   One thread per (outer, group, inner) walking its group twice straight from global memory (min / max, then
//   quantize and pack), flat index over outer * num_groups * inner (inner fastest, so the weight case reads
//   coalesced columns), 256 threads, cdiv(n, 256) blocks; int64 indices.
// Fixed: a constant group (mx == mn: an all-zero KV chunk, a padded tail of zeros, a repeated weight) gives
// mx - mn = 0, scale = 1 / 0 * 15 = inf and (x - mn) * scale = 0 * inf = NaN, which clamp_ and round_ keep, and the
// NaN -> uint8 conversion is undefined (an fp16 overflow of 15 / (mx - mn) ends the same way for x == mn): a NaN code
// is stored as 0 here (the code of x == mn); the inf scale is still stored (decompress divides by it and gets mn).
// Changed: the torch ops (pad, view, min, max, sub, mul_, clamp_, round_, to, the strided slices, bitwise_or, cat)
// fused into one launch; the caller passes the (outer, dim, inner) view of its tensor; a C++ launcher with device
// pointers, sizes and a stream.
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace flexgen {

constexpr int kNumBits = 4;
constexpr int B = (1 << kNumBits) - 1;  // 2 ** num_bits - 1
constexpr int kThreads = 256;

// torch's CUDA kernels for fp16 tensors compute each op in fp32 and round the result to fp16
__device__ __forceinline__ __half sub_h(__half a, __half b) { return __float2half(__half2float(a) - __half2float(b)); }
__device__ __forceinline__ __half mul_h(__half a, __half b) { return __float2half(__half2float(a) * __half2float(b)); }

__device__ __forceinline__ uint8_t quantize(__half x, __half mn, __half scale) {
  __half v = sub_h(x, mn);  // data = data - mn
  v = mul_h(v, scale);      // data.mul_(scale)
  float f = __half2float(v);
  if (isnan(f)) return 0;  // fixed: 0 * inf; the uint8 conversion of NaN is undefined
  f = fminf(fmaxf(f, 0.0f), (float)B);  // clamp_(0, B)
  f = nearbyintf(f);                     // round_(): half to even
  return (uint8_t)f;                     // .to(torch.uint8)
}

/* kerntune:
args  = ["tensor: in f16[outer * dim * inner]", "data: out u8[outer * cdiv(dim, 64) * 32 * inner]",
         "scale: out f16[outer * cdiv(dim, 64) * 2 * inner]", "outer: i64 = outer", "dim: i32 = dim",
         "inner: i64 = inner", "group_size: i32 = 64", "num_groups: i32 = cdiv(dim, 64)"]
sizes = [{ outer = 1, dim = 20480, inner = 5120 }, { outer = 160, dim = 128, inner = 1 },
         { outer = 1, dim = 50272, inner = 768 }]
grid  = "cdiv(outer * cdiv(dim, 64) * inner, 256)"
block = 256
*/
__global__ void __launch_bounds__(kThreads)
    compress_kernel(const __half* __restrict__ tensor, uint8_t* __restrict__ data, __half* __restrict__ scale,
                    int64_t outer, int dim, int64_t inner, int group_size, int num_groups) {
  const int64_t idx = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (idx >= outer * num_groups * inner) return;
  const int64_t i = idx % inner;
  const int64_t og = idx / inner;  // o * num_groups + g
  const int g = (int)(og % num_groups);
  const int64_t o = og / num_groups;

  const __half* x = tensor + o * dim * inner + i;  // element e of the group dim at x[e * inner]
  const int first = g * group_size;

  // Quantize: mn / mx over the group, the zero padding included
  __half mn = __float2half(0.0f), mx = __float2half(0.0f);
  for (int j = 0; j < group_size; ++j) {
    const int e = first + j;
    const __half v = e < dim ? x[(int64_t)e * inner] : __float2half(0.0f);  // Pad
    if (j == 0 || __hlt(v, mn)) mn = v;
    if (j == 0 || __hgt(v, mx)) mx = v;
  }

  // scale = B / (mx - mn): Tensor.__rtruediv__ is reciprocal() * B
  const __half range = sub_h(mx, mn);
  const __half recip = __float2half(1.0f / __half2float(range));
  const __half s = __float2half(__half2float(recip) * (float)B);

  // Pack: left (even) element in the high nibble, right (odd) element in the low nibble
  uint8_t* out = data + og * (group_size / 2) * inner + i;
  for (int p = 0; p < group_size / 2; ++p) {
    const int e0 = first + 2 * p, e1 = e0 + 1;
    const __half v0 = e0 < dim ? x[(int64_t)e0 * inner] : __float2half(0.0f);
    const __half v1 = e1 < dim ? x[(int64_t)e1 * inner] : __float2half(0.0f);
    const uint8_t q0 = quantize(v0, mn, s), q1 = quantize(v1, mn, s);
    out[p * inner] = (uint8_t)((q0 << 4) | q1);
  }

  // Reshape: torch.cat([scale, mn], dim=group_dim + 1) -> [outer, num_groups, 2, inner]
  scale[(og * 2 + 0) * inner + i] = s;
  scale[(og * 2 + 1) * inner + i] = mn;
}

}  // namespace flexgen

// tensor: device fp16, viewed as [outer, dim, inner] around the group dimension; data: [outer, num_groups *
// group_size / 2, inner] uint8; scale: [outer, num_groups, 2, inner] fp16 (scale, mn), num_groups = cdiv(dim,
// group_size). FlexGen asserts num_bits == 4, group_size even, not symmetric.
void flexgen_compress(const __half* tensor, uint8_t* data, __half* scale, int64_t outer, int dim, int64_t inner,
                      int group_size, cudaStream_t stream) {
  assert(group_size % 2 == 0 && "group_size must be even");
  const int num_groups = (dim + group_size - 1) / group_size;
  const int64_t n = outer * num_groups * inner;
  if (n == 0) return;
  const int64_t blocks = (n + flexgen::kThreads - 1) / flexgen::kThreads;
  assert(blocks <= 0x7fffffff && "grid too large");
  flexgen::compress_kernel<<<(unsigned)blocks, flexgen::kThreads, 0, stream>>>(tensor, data, scale, outer, dim, inner,
                                                                              group_size, num_groups);
}
