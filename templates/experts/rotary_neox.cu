/* kerntune-expert:
name = "rotary_neox"
family = "rotary_embedding"
description = "Rotary position embedding, GPT-NeoX style (first/second half of the rotary dims paired), applied in place to query and key heads of one token per block; cos/sin read once per vector from the cache; 16-byte accesses."
function = "kt::rotary_neox"
roles = ["positions: in P[tokens]", "query: inout T[tokens * num_heads * head_size]", "key: inout T[tokens * num_kv_heads * head_size]", "cos_sin_cache: in C[max_position * rot_dim]", "rot_dim: i32", "num_heads: i32", "num_kv_heads: i32", "head_size: i32"]
constraints = ["VEC * ESIZE <= 16", "VEC * CSIZE <= 16"]

[params.THREADS]
values = [32, 64, 128, 256, 512]
default = 128
kind = "block_size"
why = "threads per token (one block per token)"

[params.VEC]
values = [1, 2, 4, 8]
default = 4
kind = "vector_width"
why = "rotary pairs per thread step, loaded as vectors; where rot_dim / 2, head_size or a pointer does not allow VEC, the widest half of it that does (down to scalar)"

[launch]
grid = ["tokens"]
block = ["THREADS"]
smem = "0"
*/
#ifndef KT_THREADS
#define KT_THREADS 128
#endif
#ifndef KT_VEC
#define KT_VEC 4
#endif

namespace kt {

template <int VEC, typename T, typename C>
__device__ __forceinline__ void rotate_heads(T* __restrict__ base, const C* __restrict__ cs, int nheads, int head_size,
                                             int embed, int first, int step) {
  const int chunks = embed / VEC;
  for (int i = first; i < nheads * chunks; i += step) {
    const int head = i / chunks, off = (i - head * chunks) * VEC;
    T* h = base + (long long)head * head_size;
    float c[VEC], s[VEC], x[VEC], y[VEC];
    if constexpr (VEC == 1) {
      c[0] = to_f(cs[off]); s[0] = to_f(cs[embed + off]); x[0] = to_f(h[off]); y[0] = to_f(h[embed + off]);
    } else {
      load_vec<C, VEC>(cs + off, c); load_vec<C, VEC>(cs + embed + off, s);
      load_vec<T, VEC>(h + off, x); load_vec<T, VEC>(h + embed + off, y);
    }
    float nx[VEC], ny[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      nx[j] = x[j] * c[j] - y[j] * s[j];
      ny[j] = y[j] * c[j] + x[j] * s[j];
    }
    if constexpr (VEC == 1) {
      h[off] = from_f<T>(nx[0]); h[embed + off] = from_f<T>(ny[0]);
    } else {
      store_vec<T, VEC>(h + off, nx); store_vec<T, VEC>(h + embed + off, ny);
    }
  }
}

template <int V, typename T, typename C>
__device__ __forceinline__ bool rotary_vec_ok(int embed, int head_size, int rot_dim, const T* query, const T* key,
                                              const C* cache) {
  return vec_ok<T, V>(embed, query, key) && (head_size % V) == 0 && vec_ok<C, V>(embed, cache) && (rot_dim % V) == 0;
}
constexpr int HALF_VEC = KT_VEC >= 4 ? KT_VEC / 2 : 1;
constexpr int QUARTER_VEC = KT_VEC >= 8 ? KT_VEC / 4 : 1;

template <typename P, typename T, typename C>
__device__ __forceinline__ void rotary_neox(const P* positions, T* query, T* key, const C* cache, int rot_dim,
                                            int num_heads, int num_kv_heads, int head_size) {
  const long long token = blockIdx.x;
  const long long pos = (long long)positions[token];
  const C* cs = cache + pos * rot_dim;
  const int embed = rot_dim / 2;
  T* q = query + token * num_heads * head_size;
  T* k = key + token * num_kv_heads * head_size;
  // the widest vector (VEC, then halves of it) that the rotary half, the head and the pointers allow
  if (rotary_vec_ok<KT_VEC, T, C>(embed, head_size, rot_dim, query, key, cache)) {
    rotate_heads<KT_VEC>(q, cs, num_heads, head_size, embed, threadIdx.x, blockDim.x);
    rotate_heads<KT_VEC>(k, cs, num_kv_heads, head_size, embed, threadIdx.x, blockDim.x);
  } else if (KT_VEC >= 4 && rotary_vec_ok<HALF_VEC, T, C>(embed, head_size, rot_dim, query, key, cache)) {
    rotate_heads<HALF_VEC>(q, cs, num_heads, head_size, embed, threadIdx.x, blockDim.x);
    rotate_heads<HALF_VEC>(k, cs, num_kv_heads, head_size, embed, threadIdx.x, blockDim.x);
  } else if (KT_VEC >= 8 && rotary_vec_ok<QUARTER_VEC, T, C>(embed, head_size, rot_dim, query, key, cache)) {
    rotate_heads<QUARTER_VEC>(q, cs, num_heads, head_size, embed, threadIdx.x, blockDim.x);
    rotate_heads<QUARTER_VEC>(k, cs, num_kv_heads, head_size, embed, threadIdx.x, blockDim.x);
  } else {
    rotate_heads<1>(q, cs, num_heads, head_size, embed, threadIdx.x, blockDim.x);
    rotate_heads<1>(k, cs, num_kv_heads, head_size, embed, threadIdx.x, blockDim.x);
  }
}

}  // namespace kt
