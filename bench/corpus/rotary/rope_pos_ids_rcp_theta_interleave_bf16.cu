// Rotary embedding on query and key heads (bf16), out of place, in the style of FlashInfer's pos_enc.cuh
// (BatchQKApplyRotaryPosIds): no cos/sin cache: each thread computes the frequencies of its vector,
// freq = rope_rcp_scale * __powf(rope_rcp_theta, 2 * pair / rotary_dim) (the reciprocal of the base, below one),
// and the angle's sine and cosine with the fast intrinsic __sincosf; pairs interleaved (GPT-J: 2i, 2i + 1) as the
// template's `interleave`; uint32_t sizes, int32 position ids; 16-byte vectors (vec_size elements), a thread per
// vector of a head, bdy tokens per block along y, the heads (query, then key) along gridDim.y; the part of a head
// past rotary_dim copied through.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace rope {

template <uint32_t vec_size>
struct alignas(16) bf16_vec {
  __nv_bfloat16 v[vec_size];
};

/* kerntune:
args  = ["q: in bf16[nnz * num_qo_heads * 128]", "k: in bf16[nnz * num_kv_heads * 128]",
         "q_rope: out bf16[nnz * num_qo_heads * 128]", "k_rope: out bf16[nnz * num_kv_heads * 128]",
         "pos_ids: in i32[nnz] ~ randint(0, 16384)", "nnz: u32 = nnz", "num_qo_heads: u32 = num_qo_heads",
         "num_kv_heads: u32 = num_kv_heads", "rotary_dim: u32 = rotary_dim", "rope_rcp_scale: f32 = 1.0",
         "rope_rcp_theta: f32 = 0.0001"]
sizes = [{ nnz = 16384, num_qo_heads = 32, num_kv_heads = 8, rotary_dim = 128 },
         { nnz = 7, num_qo_heads = 32, num_kv_heads = 8, rotary_dim = 128 },
         { nnz = 1001, num_qo_heads = 28, num_kv_heads = 4, rotary_dim = 64 }]
template_args = ["true", "8", "16", "__nv_bfloat16", "int32_t"]
grid  = ["cdiv(nnz, 8)", "num_qo_heads + num_kv_heads"]
block = [16, 8]
*/
template <bool interleave, uint32_t vec_size, uint32_t bdx, typename DType, typename IdType>
__global__ void BatchQKApplyRotaryPosIdsKernel(const DType* __restrict__ q, const DType* __restrict__ k,
                                               DType* __restrict__ q_rope, DType* __restrict__ k_rope,
                                               const IdType* __restrict__ pos_ids, uint32_t nnz,
                                               uint32_t num_qo_heads, uint32_t num_kv_heads, uint32_t rotary_dim,
                                               float rope_rcp_scale, float rope_rcp_theta) {
  constexpr uint32_t head_dim = vec_size * bdx;
  const uint32_t tx = threadIdx.x, ty = threadIdx.y;
  const uint32_t idx = blockIdx.x * blockDim.y + ty;
  const uint32_t head_idx = blockIdx.y;
  if (idx >= nnz) return;

  const bool is_q = head_idx < num_qo_heads;
  const uint32_t h = is_q ? head_idx : head_idx - num_qo_heads;
  const uint32_t nheads = is_q ? num_qo_heads : num_kv_heads;
  const DType* in = (is_q ? q : k) + ((size_t)idx * nheads + h) * head_dim;
  DType* out = (is_q ? q_rope : k_rope) + ((size_t)idx * nheads + h) * head_dim;

  bf16_vec<vec_size> x = *reinterpret_cast<const bf16_vec<vec_size>*>(in + tx * vec_size);
  if (tx * vec_size >= rotary_dim) {  // past the rotated part: copied through
    *reinterpret_cast<bf16_vec<vec_size>*>(out + tx * vec_size) = x;
    return;
  }

  float freq[vec_size];
#pragma unroll
  for (uint32_t i = 0; i < vec_size; ++i) {
    const uint32_t pair = interleave ? (tx * vec_size + i) / 2 : (tx * vec_size + i) % (rotary_dim / 2);
    freq[i] = rope_rcp_scale * __powf(rope_rcp_theta, float(2 * pair) / float(rotary_dim));
  }
  const float pos = float(pos_ids[idx]);

  bf16_vec<vec_size> y;
  if (interleave) {
#pragma unroll
    for (uint32_t i = 0; i < vec_size; i += 2) {
      float sin0, cos0;
      __sincosf(pos * freq[i], &sin0, &cos0);
      const float x0 = __bfloat162float(x.v[i]), x1 = __bfloat162float(x.v[i + 1]);
      y.v[i] = __float2bfloat16(x0 * cos0 - x1 * sin0);
      y.v[i + 1] = __float2bfloat16(x1 * cos0 + x0 * sin0);
    }
  } else {  // NeoX halves: the partner of element e is e +- rotary_dim / 2
    const uint32_t half = rotary_dim / 2;
    const bool first = tx * vec_size < half;
    bf16_vec<vec_size> p = *reinterpret_cast<const bf16_vec<vec_size>*>(in + (first ? tx * vec_size + half
                                                                                      : tx * vec_size - half));
#pragma unroll
    for (uint32_t i = 0; i < vec_size; ++i) {
      float s, c;
      __sincosf(pos * freq[i], &s, &c);
      const float xi = __bfloat162float(x.v[i]), pi = __bfloat162float(p.v[i]);
      y.v[i] = __float2bfloat16(first ? xi * c - pi * s : xi * c + pi * s);
    }
  }
  *reinterpret_cast<bf16_vec<vec_size>*>(out + tx * vec_size) = y;
}

}  // namespace rope

// q, q_rope: [nnz, num_qo_heads, 128]; k, k_rope: [nnz, num_kv_heads, 128]; pos_ids: [nnz]
cudaError_t BatchQKApplyRotaryPosIds(const __nv_bfloat16* q, const __nv_bfloat16* k, __nv_bfloat16* q_rope,
                                     __nv_bfloat16* k_rope, const int32_t* pos_ids, uint32_t nnz,
                                     uint32_t num_qo_heads, uint32_t num_kv_heads, uint32_t rotary_dim,
                                     bool interleave, float rope_scale, float rope_theta, cudaStream_t stream) {
  constexpr uint32_t vec_size = 16 / sizeof(__nv_bfloat16);
  constexpr uint32_t head_dim = 128;
  constexpr uint32_t bdx = head_dim / vec_size;
  constexpr uint32_t num_threads = 128;
  constexpr uint32_t bdy = num_threads / bdx;
  const float rope_rcp_scale = 1.0f / rope_scale;
  const float rope_rcp_theta = 1.0f / rope_theta;
  const dim3 nblks((nnz + bdy - 1) / bdy, num_qo_heads + num_kv_heads);
  const dim3 nthrs(bdx, bdy);
  if (interleave) {
    rope::BatchQKApplyRotaryPosIdsKernel<true, vec_size, bdx, __nv_bfloat16, int32_t><<<nblks, nthrs, 0, stream>>>(
        q, k, q_rope, k_rope, pos_ids, nnz, num_qo_heads, num_kv_heads, rotary_dim, rope_rcp_scale, rope_rcp_theta);
  } else {
    rope::BatchQKApplyRotaryPosIdsKernel<false, vec_size, bdx, __nv_bfloat16, int32_t><<<nblks, nthrs, 0, stream>>>(
        q, k, q_rope, k_rope, pos_ids, nnz, num_qo_heads, num_kv_heads, rotary_dim, rope_rcp_scale, rope_rcp_theta);
  }
  return cudaGetLastError();
}
