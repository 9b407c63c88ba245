// Merge of the per-chunk partial attention outputs as PaddleNLP's append attention writes it (csrc/gpu/append_attn,
// merge_multi_chunks_kernel; the same code now lives in FastDeploy): the KV sequence of each request was split into
// chunks of chunk_size keys, each chunk's attention wrote an UNNORMALIZED partial output (the sum of exp(s - m) v,
// in the storage type) with its running max m and denominator d in fp32, and this kernel folds the chunks of each
// query token and head in order:
//   m = max(m_prev, m_i)   s1 = __expf(m_prev - m)   s2 = __expf(m_i - m)   d = d * s1 + d_i * s2
//   o = o * T(s1) + o_i * T(s2)       every multiply and add in bf16 operators (T = __nv_bfloat16), the scales
//                                     rounded to bf16 first
//   out = o / d                       a bf16 division (d converted to bf16)
// starting from o = 0, d = 1 and m = -3.0e+30f (PaddleNLP's bf16 "minus infinity"; -5e4f for half). The number of
// chunks of a request is div_up(seq_lens_kv[b], chunk_size) <= num_chunks; a query token maps to its request
// through padding_offsets (token id + offset = position in the padded [bsz, max_seq_len] batch); requests with
// seq_lens_q or seq_lens_kv <= 0 are skipped (their out rows left as they are). Inputs: m uniform(-4, 12), d
// uniform(1, 8) and partial sums uniform(-8, 8), so that out = o / d is of order 1.
// PaddleNLP's conventions: layouts multi_out [token_num, num_chunks, num_heads, head_dim], multi_m / multi_d
// [token_num, num_chunks, num_heads], out [token_num, num_heads, head_dim]; one query token per block
// (qid = blockIdx.x), the head on threadIdx.y and a 16-byte AlignedVector<T, vec_size> of channels on
// threadIdx.x (block (head_dim / vec_size, num_heads)), Load / Store helpers, #pragma unroll 2 over the chunks,
// template <T, vec_size> with vec_size = 16 / sizeof(T). (The PaddleNLP kernel also carries the shift / smooth /
// out-quantization arguments of its fused epilogue, unused by this merge; they are left out here.)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

#define HOSTDEVICE __host__ __device__

// helpers of PaddleNLP's helper.h, declared with its HOSTDEVICE macro
template <typename T, int Size>
struct alignas(sizeof(T) * Size) AlignedVector {
  T val[Size];

  HOSTDEVICE inline const T& operator[](int i) const { return val[i]; }
  HOSTDEVICE inline T& operator[](int i) { return val[i]; }
};

template <typename T, int Size>
HOSTDEVICE inline void Load(const T* addr, AlignedVector<T, Size>* vec) {
  const AlignedVector<T, Size>* addr_vec =
      reinterpret_cast<const AlignedVector<T, Size>*>(addr);
  *vec = *addr_vec;
}

template <typename T, int Size>
HOSTDEVICE inline void Store(const AlignedVector<T, Size>& vec, T* addr) {
  AlignedVector<T, Size>* addr_vec =
      reinterpret_cast<AlignedVector<T, Size>*>(addr);
  *addr_vec = vec;
}

template <typename T>
inline HOSTDEVICE T div_up(T a, T b) {
  return (a + b - 1) / b;
}

/* kerntune:
args  = ["multi_out: in bf16[bsz * max_seq_len * num_chunks * num_heads * head_dim] ~ uniform(-8, 8)",
         "multi_m: in f32[bsz * max_seq_len * num_chunks * num_heads] ~ uniform(-4, 12)",
         "multi_d: in f32[bsz * max_seq_len * num_chunks * num_heads] ~ uniform(1, 8)",
         "seq_lens_q: in i32[bsz] ~ randint(1, max_seq_len + 1)",
         "seq_lens_kv: in i32[bsz] ~ randint(1, num_chunks * chunk_size + 1)",
         "padding_offsets: in i32[bsz * max_seq_len] ~ zeros",
         "out: out bf16[bsz * max_seq_len * num_heads * head_dim]",
         "max_seq_len: i32 = max_seq_len", "num_chunks: i32 = num_chunks", "num_heads: i32 = num_heads",
         "chunk_size: i32 = chunk_size", "head_dim: i32 = head_dim"]
sizes = [{ bsz = 512, max_seq_len = 1, num_chunks = 16, chunk_size = 512, num_heads = 32, head_dim = 128 },
         { bsz = 4, max_seq_len = 1, num_chunks = 8, chunk_size = 1024, num_heads = 32, head_dim = 128 },
         { bsz = 3, max_seq_len = 37, num_chunks = 5, chunk_size = 256, num_heads = 7, head_dim = 128 }]
grid  = "bsz * max_seq_len"
block = ["head_dim / 8", "num_heads"]
template_args = ["__nv_bfloat16", "8"]
*/
template <typename T, int vec_size>
__global__ void merge_multi_chunks_kernel(
    const T* __restrict__ multi_out,    // [token_num, num_chunks, num_heads,
                                        // head_dim]
    const float* __restrict__ multi_m,  // [token_num, num_chunks, num_heads]
    const float* __restrict__ multi_d,  // [token_num, num_chunks, num_heads]
    const int* __restrict__ seq_lens_q,
    const int* __restrict__ seq_lens_kv,
    const int* __restrict__ padding_offsets,
    T* __restrict__ out,
    const int max_seq_len,
    const int num_chunks,
    const int num_heads,
    const int chunk_size,
    const int head_dim) {
  const int vid = threadIdx.x, hid = threadIdx.y;
  const int qid = blockIdx.x;
  const uint32_t ori_token_id = qid + padding_offsets[qid];
  const uint32_t bid = ori_token_id / max_seq_len;
  if (seq_lens_q[bid] <= 0 || seq_lens_kv[bid] <= 0) {
    return;
  }
  const int seq_len_kv = seq_lens_kv[bid];
  const int num_chunks_this_seq = div_up(seq_len_kv, chunk_size);

  using LoadT = AlignedVector<T, vec_size>;
  LoadT load_vec;
  LoadT res_vec;
  if constexpr (std::is_same<T, half>::value) {
#pragma unroll
    for (int i = 0; i < vec_size / 2; ++i) {
      *((half2*)(&res_vec) + i) = make_half2(0, 0);
    }
  } else {
#pragma unroll
    for (int i = 0; i < vec_size / 2; ++i) {
      *((nv_bfloat162*)(&res_vec) + i) = make_bfloat162(0, 0);
    }
  }
  float m;
  float d = 1.f;
  if constexpr (std::is_same<T, half>::value) {
    m = -5e4f;
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    m = -3.0e+30f;
  }
#pragma unroll 2
  for (int i = 0; i < num_chunks_this_seq; ++i) {
    uint32_t offset = (qid * num_chunks + i) * num_heads + hid;
    float m_prev = m;
    const float m_now = multi_m[offset];
    const float d_now = multi_d[offset];
    m = max(m_prev, m_now);
    offset = (qid * num_chunks * num_heads + i * num_heads + hid) * head_dim +
             vid * vec_size;
    Load<T, vec_size>(&multi_out[offset], &load_vec);
    const float scale1 = __expf(m_prev - m), scale2 = __expf(m_now - m);
    const T scale1_T = static_cast<T>(scale1),
            scale2_T = static_cast<T>(scale2);
    d = d * scale1 + d_now * scale2;
    for (int j = 0; j < vec_size; j++) {
      res_vec[j] = res_vec[j] * scale1_T + load_vec[j] * scale2_T;
    }
  }
#pragma unroll
  for (int j = 0; j < vec_size; j++) {
    res_vec[j] /= d;
  }
  Store<T, vec_size>(res_vec,
                     &out[(qid * num_heads + hid) * head_dim + vid * vec_size]);
}

// The merge step of the chunked (split-KV) attention: device pointers, head_dim a multiple of 16 bytes.
template <typename T>
void MergeMultiChunks(const T* multi_out, const float* multi_m, const float* multi_d, const int* seq_lens_q,
                      const int* seq_lens_kv, const int* padding_offsets, T* out, const int token_num,
                      const int max_seq_len, const int num_chunks, const int num_heads, const int chunk_size,
                      const int head_dim, cudaStream_t stream) {
  constexpr int vec_size = 16 / sizeof(T);
  dim3 grids_merge(token_num);
  dim3 blocks_merge(head_dim / vec_size, num_heads);
  merge_multi_chunks_kernel<T, vec_size><<<grids_merge, blocks_merge, 0, stream>>>(
      multi_out, multi_m, multi_d, seq_lens_q, seq_lens_kv, padding_offsets, out, max_seq_len, num_chunks,
      num_heads, chunk_size, head_dim);
}

template void MergeMultiChunks<__nv_bfloat16>(const __nv_bfloat16*, const float*, const float*, const int*,
                                              const int*, const int*, __nv_bfloat16*, const int, const int,
                                              const int, const int, const int, const int, cudaStream_t);
