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
// kt:bind KT_EXPERT_PAIRING = 0  (0: NeoX, element i paired with i + rot_dim / 2; 1: GPT-J, 2i paired with 2i + 1)
// kt:bind KT_EXPERT_CACHE = 0  (0: one cache [max_position, rot_dim], cos half then sin half; 1: two caches cos and sin, rows of cache_stride)
#ifndef KT_THREADS
#define KT_THREADS 128
#endif
#ifndef KT_VEC
#define KT_VEC 4
#endif

namespace kt {

#if KT_EXPERT_PAIRING + KT_EXPERT_CACHE == 0  // kt:bind
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
#else  // kt:bind
// Rotate the first rot_dim elements of each head: VEC cos/sin values per step, NeoX pairs (i, i + embed) or,
// with GPTJ, adjacent pairs (2i, 2i + 1) (VEC pairs: two VEC-wide loads of the head).
template <int VEC, bool GPTJ, typename T, typename C>
__device__ __forceinline__ void rotate_pairs(T* __restrict__ base, const C* __restrict__ cosp, const C* __restrict__ sinp,
                                             int nheads, int head_size, int embed, int first, int step) {
  const int chunks = embed / VEC;
  for (int i = first; i < nheads * chunks; i += step) {
    const int head = i / chunks, off = (i - head * chunks) * VEC;
    T* h = base + (long long)head * head_size;
    float c[VEC], s[VEC], x[VEC], y[VEC];
    if constexpr (VEC == 1) {
      c[0] = to_f(cosp[off]); s[0] = to_f(sinp[off]);
    } else {
      load_vec<C, VEC>(cosp + off, c); load_vec<C, VEC>(sinp + off, s);
    }
    float p0[VEC], p1[VEC];
    T* lo = GPTJ ? h + 2 * off : h + off;
    T* hi = GPTJ ? h + 2 * off + VEC : h + embed + off;
    if constexpr (VEC == 1) {
      p0[0] = to_f(lo[0]); p1[0] = to_f(GPTJ ? lo[1] : hi[0]);
    } else {
      load_vec<T, VEC>(lo, p0); load_vec<T, VEC>(hi, p1);
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if constexpr (GPTJ) {
        x[j] = 2 * j < VEC ? p0[2 * j] : p1[2 * j - VEC];
        y[j] = 2 * j + 1 < VEC ? p0[2 * j + 1] : p1[2 * j + 1 - VEC];
      } else {
        x[j] = p0[j]; y[j] = p1[j];
      }
    }
    float nx[VEC], ny[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      nx[j] = x[j] * c[j] - y[j] * s[j];
      ny[j] = y[j] * c[j] + x[j] * s[j];
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if constexpr (GPTJ) {
        if (2 * j < VEC) p0[2 * j] = nx[j]; else p1[2 * j - VEC] = nx[j];
        if (2 * j + 1 < VEC) p0[2 * j + 1] = ny[j]; else p1[2 * j + 1 - VEC] = ny[j];
      } else {
        p0[j] = nx[j]; p1[j] = ny[j];
      }
    }
    if constexpr (VEC == 1) {
      lo[0] = from_f<T>(p0[0]);
      if (GPTJ) lo[1] = from_f<T>(p1[0]); else hi[0] = from_f<T>(p1[0]);
    } else {
      store_vec<T, VEC>(lo, p0); store_vec<T, VEC>(hi, p1);
    }
  }
}

template <int V, typename T, typename C>
__device__ __forceinline__ bool pairs_vec_ok(int embed, int head_size, int stride, const T* query, const T* key,
                                             const C* cosp, const C* sinp) {
  return vec_ok<T, V>(embed, query, key) && (head_size % V) == 0 && vec_ok<C, V>(embed, cosp, sinp) &&
         (stride % V) == 0;
}
constexpr int HALF_VEC = KT_VEC >= 4 ? KT_VEC / 2 : 1;
constexpr int QUARTER_VEC = KT_VEC >= 8 ? KT_VEC / 4 : 1;

#if KT_EXPERT_CACHE == 1  // kt:bind
template <typename P, typename T, typename C>
__device__ __forceinline__ void rotary_neox(const P* positions, T* query, T* key, const C* cos_cache,
                                            const C* sin_cache, int cache_stride, int rot_dim, int num_heads,
                                            int num_kv_heads, int head_size) {
  const long long token = blockIdx.x;
  const long long pos = (long long)positions[token];
  const C* cosp = cos_cache + pos * cache_stride;
  const C* sinp = sin_cache + pos * cache_stride;
  const int stride = cache_stride;
  const C* cbase = cos_cache;
  const C* sbase = sin_cache;
#else  // kt:bind
template <typename P, typename T, typename C>
__device__ __forceinline__ void rotary_neox(const P* positions, T* query, T* key, const C* cache, int rot_dim,
                                            int num_heads, int num_kv_heads, int head_size) {
  const long long token = blockIdx.x;
  const long long pos = (long long)positions[token];
  const C* cosp = cache + pos * rot_dim;
  const C* sinp = cosp + rot_dim / 2;
  const int stride = rot_dim;
  const C* cbase = cache;
  const C* sbase = cache + rot_dim / 2;
#endif  // kt:bind
  constexpr bool GPTJ = KT_EXPERT_PAIRING == 1;
  const int embed = rot_dim / 2;
  T* q = query + token * num_heads * head_size;
  T* k = key + token * num_kv_heads * head_size;
  // the widest vector (VEC, then halves of it) that the rotary half, the head, the cache rows and the pointers allow
  if (pairs_vec_ok<KT_VEC, T, C>(embed, head_size, stride, query, key, cbase, sbase)) {
    rotate_pairs<KT_VEC, GPTJ>(q, cosp, sinp, num_heads, head_size, embed, threadIdx.x, blockDim.x);
    rotate_pairs<KT_VEC, GPTJ>(k, cosp, sinp, num_kv_heads, head_size, embed, threadIdx.x, blockDim.x);
  } else if (KT_VEC >= 4 && pairs_vec_ok<HALF_VEC, T, C>(embed, head_size, stride, query, key, cbase, sbase)) {
    rotate_pairs<HALF_VEC, GPTJ>(q, cosp, sinp, num_heads, head_size, embed, threadIdx.x, blockDim.x);
    rotate_pairs<HALF_VEC, GPTJ>(k, cosp, sinp, num_kv_heads, head_size, embed, threadIdx.x, blockDim.x);
  } else if (KT_VEC >= 8 && pairs_vec_ok<QUARTER_VEC, T, C>(embed, head_size, stride, query, key, cbase, sbase)) {
    rotate_pairs<QUARTER_VEC, GPTJ>(q, cosp, sinp, num_heads, head_size, embed, threadIdx.x, blockDim.x);
    rotate_pairs<QUARTER_VEC, GPTJ>(k, cosp, sinp, num_kv_heads, head_size, embed, threadIdx.x, blockDim.x);
  } else {
    rotate_pairs<1, GPTJ>(q, cosp, sinp, num_heads, head_size, embed, threadIdx.x, blockDim.x);
    rotate_pairs<1, GPTJ>(k, cosp, sinp, num_kv_heads, head_size, embed, threadIdx.x, blockDim.x);
  }
}
#endif  // kt:bind

}  // namespace kt
