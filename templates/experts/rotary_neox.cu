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
// kt:bind KT_EXPERT_CACHE = 0  (0: one cache [max_position, rot_dim], cos half then sin half; 1: two caches cos and sin, rows of cache_stride, the first rot_dim / 2 used; 2: two caches, rows of rot_dim, the second half for the second element of each pair (Hugging Face); 3: one cache [max_position, rot_dim] of (cos, sin) pairs, pair i at 2i and 2i + 1 (complex freqs_cis); 4: no cache: each token's angles computed once per block into shared memory from its position, a frequency base, a frequency scale and an attention factor (KT_EXPERT_ANGLE); 5: an fp32 tensor of angles [max_position, rot_dim / 2] (position * inv_freq, one a pair: freqs), cos and sin of the token's row computed once per block into shared memory by sincosf (KT_EXPERT_FAST_ANGLE: __sincosf); 6: the same with rows of rot_dim, each element of a NeoX pair its own angle (Transformer Engine's and Megatron's freqs [s, 1, 1, rot_dim], the two halves duplicated); 7: an fp32 table of inverse frequencies [rot_dim / 2] (Hugging Face's inv_freq buffer kept as a model weight: CPM.cu, ports of LlamaRotaryEmbedding), pair i of a token at position pos turned by theta = (float)pos * inv_freq[i], cos and sin computed once per block into shared memory as with 5 (the angles' table is one row for every position, angle_stride its length rot_dim / 2))
// kt:bind KT_EXPERT_ANGLE = 0  (no cache: the inverse frequency of pair i of rot_dim / 2, theta = pos * inv * scale; 0: powf(base, -(2i) / rot_dim); 1: powf(base, i) (base = base^(-2 / rot_dim) computed by the host); 2: 1 / powf(base, 2i / rot_dim); 3: powf(base, 2i / rot_dim) (base = 1 / theta); 4: 1.0 / powf(base, 2i / rot_dim) with the reciprocal and its product with pos in double, rounded to float once, then * scale (DeepSpeed's apply_rotary_pos_half))
// kt:bind KT_EXPERT_ANGLE_SMOOTH = 0  (no cache, positions given: 0: theta = pos * inv * scale as above; 1: Llama 3.1's frequency rescaling computed in the kernel (FlashInfer's BatchQKApplyLlama31Rotary: smooth_a, smooth_b the last two arguments): f the inverse frequency, s = clamp(f * smooth_a + smooth_b, 0, 1), f' = (1 - s) * (f * scale) + s * f, theta = pos * f')
// kt:bind KT_EXPERT_FAST_ANGLE = 0  (no cache: 0: powf, cosf and sinf; 1: the fast intrinsics __powf and __sincosf, for a kernel that uses them; an angles tensor: 0: sincosf, 1: __sincosf)
// kt:bind KT_EXPERT_POSITIONS = 1  (1: token t's cos and sin are the cache's row positions[t]; 0: there are no positions, the caller gathered each token's cos and sin: row t (Hugging Face's apply_rotary_pos_emb(q, k, cos, sin)); 2: tokens are sequences of seq_len (the last argument), positions one offset per sequence: token t's row is positions[t / seq_len] + t % seq_len (flash-attn's seqlen_offsets, a KV cache's length per sequence while decoding); 3: no positions, each token's position its index in its sequence: tokens are sequences of seq_len (the second to last argument), token t's row is pos_offset (the last argument, a start position shared by every sequence, 0 where there is none) + t % seq_len: [batch, seq, heads, head_size] with its heads (candle's rope_thd, FlashAttention's rotary with an int seqlen_offset), or head-major [batch, heads, seq, head_size] with each (batch, head, seq) row a token of one head (candle's rope and rope_i); 4: no positions, sequence-major [s, batch, heads, head_size] (Megatron's and Transformer Engine's SBHD): token t is batch entry t % batch at position t / batch (batch the last argument))
// kt:bind KT_EXPERT_TOKEN_STRIDE = 0  (0: a token's query and key heads are num_heads * head_size and num_kv_heads * head_size elements apart; 1: q_stride and k_stride elements (the last two arguments): query and key as views of one fused qkv buffer, the v heads left untouched, or strided views of the rotary channels, each pointer moved to them (vLLM's query_stride / key_stride / head_stride: DeepSeek MLA's q_pe, the tail of each q head, and k_pe, the tail of each kv_a row, as one head))
// kt:bind KT_EXPERT_OUT_OF_PLACE = 0  (0: query and key rotated in place; 1: read from inputs, written to outputs, the part past rot_dim copied)
// kt:bind KT_EXPERT_STORAGE_MATH = 0  (0: the rotation in fp32, rounded once to T; 1: in T's own arithmetic, each product and each sum rounded to T (candle's rope on __half / __nv_bfloat16 operators: a 16-bit kernel that never converts to float))
// kt:bind KT_EXPERT_BLOCK_HEADS = 0  (with KT_EXPERT_TOKEN_STRIDE, or KT_EXPERT_POSITIONS 3 with no cache and no KT_EXPERT_ROW_TOKENS: 0: the head counts are arguments, a block of THREADS threads per token; 1: no argument gives how many heads of a token's row are rotated (the launch grid does: a partial rotary of the q and k heads of a fused qkv row; ManagedLlama2's rope, whose query rows are gridDim.x heads): the block is (THREADS / heads, heads), the count read back from blockDim.y, its threads one range over the token's pairs)
// kt:bind KT_EXPERT_ROW_TOKENS = 0  (with KT_EXPERT_POSITIONS 3 (a cos/sin cache, or none: angles computed), a token a row of one head (candle's head-major rope, DeepSpeed's head-major query): 0: a block a token; 1: a warp a token, THREADS / 32 tokens a block (the block (32, THREADS / 32): THREADS threads, within the kernel's launch bounds), the token count the last argument: a block of 32 threads for one 64-pair row is launch-bound)
// kt:bind KT_EXPERT_KEY_ROWS = 0  (with KT_EXPERT_POSITIONS 3 and no cache: 0: the key's token t is row t of [tokens, num_kv_heads * head_size], as the query's; 1: row (t / seq_len) * key_seq + t % seq_len (key_seq the argument after pos_offset): the keys rotated inside a KV cache of key_seq rows a sequence (a head's slice in head-major [batch * heads, key_seq, head_size]: DeepSpeed's max_out_tokens), the new tokens' rows at its start)
// kt:bind KT_EXPERT_SEQ_OFFSETS = 0  (with KT_EXPERT_POSITIONS 3 and no cache: 0: token t at pos_offset + t % seq_len; 1: at positions[t / seq_len] + t % seq_len + pos_offset, positions one offset per sequence (grok-1's per-batch offset, flash-attn's seqlen_offsets) with the angles computed)
// kt:bind KT_EXPERT_POS_DIV = 0  (with KT_EXPERT_POSITIONS 3 and a cos and a sin table (KT_EXPERT_CACHE 1, 2), a token a row of one head: 0: token t at pos_offset + t % seq_len; 1: at pos_offset + (t / pos_div) % seq_len, pos_div (long long, the last argument) the rows one position spans, both perhaps chosen at run time by a flag of the kernel: CTranslate2's rotary, one block a row, [batch, heads, time, depth] (pos_div 1, seq_len max_time) where `transpose`, else [time, heads, depth] (pos_div heads, seq_len 0x7fffffff: no wrap); candle's rope_thd rows (pos_div heads))
// kt:bind KT_EXPERT_QK_NORM = 0  (0: the heads rotated as they are; 1: each query and key head RMS-normalized before the rotation (Qwen3's q_norm / k_norm fused into the rope: vLLM's and SGLang's fused_qk_norm_rope, TensorRT-LLM's fusedQKNormRope, MNN's ropeC4): r = rsqrtf(sum of the head's squares / head_size + eps), each element times (r * gamma[d]) in fp32, then rotated (the channels past rot_dim written normalized), one rounding to T; a cache or gathered cos and sin (KT_EXPERT_CACHE 0-3, positions or none), a block of whole warps; the last six arguments q_gamma, k_gamma (G, head_size each), q_eps, k_eps, q_norm, k_norm: each part normalized only where its flag is true at run time (the kernel's own flags, or true where its norm has none); neither: the plain vectorized rotation)
// kt:bind KT_EXPERT_HEAD_MAJOR = 0  (with KT_EXPERT_POSITIONS 0 or 1 and a cos/sin cache (KT_EXPERT_CACHE 0 to 3), no KT_EXPERT_TOKEN_STRIDE or KT_EXPERT_QK_NORM: 0: token-major, a token's heads side by side ([tokens, heads, head_size]); 1: head-major [batch, heads, seq_len, head_size] (Hugging Face's apply_rotary_pos_emb over q and k of [b, h, s, d], its ports): token t is position t % seq_len of batch entry t / seq_len (seq_len the last argument), its heads seq_len * head_size elements apart; its cos/sin row t (KT_EXPERT_POSITIONS 0: tables of a row per (batch, position), Hugging Face's cos and sin [b, s, d]) or positions[t] (position_ids [b, s]))
// kt:bind-block KT_EXPERT_ROW_TOKENS = ["32", "max(1, THREADS / 32)"]
// kt:bind-grid KT_EXPERT_ROW_TOKENS = ["cdiv(tokens, max(1, THREADS / 32))"]
// kt:bind-block KT_EXPERT_BLOCK_HEADS = ["max(1, THREADS / num_heads)", "num_heads"]
#ifndef KT_THREADS
#define KT_THREADS 128
#endif
#ifndef KT_VEC
#define KT_VEC 4
#endif

namespace kt {

#if KT_EXPERT_PAIRING + KT_EXPERT_CACHE + KT_EXPERT_OUT_OF_PLACE + KT_EXPERT_TOKEN_STRIDE + (KT_EXPERT_POSITIONS >= 2) + KT_EXPERT_STORAGE_MATH + KT_EXPERT_QK_NORM + KT_EXPERT_HEAD_MAJOR == 0  // kt:bind
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
#if KT_EXPERT_POSITIONS == 0  // kt:bind
  const long long pos = token;
#else  // kt:bind
  const long long pos = (long long)positions[token];
#endif  // kt:bind
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
#if KT_EXPERT_CACHE == 3  // kt:bind
// VEC (cos, sin) pairs stored interleaved (cos_i at 2i, sin_i at 2i + 1): two VEC-wide loads, split apart
template <int VEC, typename C>
__device__ __forceinline__ void load_cos_sin_pairs(const C* __restrict__ cs, float* c, float* s) {
  float a[VEC], b[VEC];
  load_vec<C, VEC>(cs, a); load_vec<C, VEC>(cs + VEC, b);
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    c[j] = 2 * j < VEC ? a[2 * j] : b[2 * j - VEC];
    s[j] = 2 * j + 1 < VEC ? a[2 * j + 1] : b[2 * j + 1 - VEC];
  }
}
#endif  // kt:bind
// The general case: NeoX pairs (i, i + rot_dim / 2) or, with GPTJ, adjacent pairs (2i, 2i + 1) (VEC pairs: two
// VEC-wide loads of the head); cos and sin each from its own row pointer (one cache: its two halves); read from
// src and written to dst (in place: the same). Out of place, the head's elements past rot_dim are copied.
template <int VEC, bool GPTJ, bool FULL, typename T, typename C>
__device__ __forceinline__ void rotate_pairs(const T* src, T* dst, const C* __restrict__ cosp,
                                             const C* __restrict__ sinp, int nheads, int head_size, int embed,
                                             int first, int step) {
  const int chunks = embed / VEC;
  for (int i = first; i < nheads * chunks; i += step) {
    const int head = i / chunks, off = (i - head * chunks) * VEC;
    const long long h = (long long)head * head_size;
    const int lo = GPTJ ? 2 * off : off, hi = GPTJ ? 2 * off + VEC : embed + off;
    float c[VEC], s[VEC], c2[VEC], s2[VEC], p0[VEC], p1[VEC], x[VEC], y[VEC];
    if constexpr (FULL) {  // the second element of each pair has cos and sin of its own
      if constexpr (VEC == 1) {
        c2[0] = to_f(cosp[embed + off]); s2[0] = to_f(sinp[embed + off]);
      } else {
        load_vec<C, VEC>(cosp + embed + off, c2); load_vec<C, VEC>(sinp + embed + off, s2);
      }
    }
    if constexpr (VEC == 1) {
#if KT_EXPERT_CACHE == 3  // kt:bind
      c[0] = to_f(cosp[2 * off]); s[0] = to_f(cosp[2 * off + 1]);
#else  // kt:bind
      c[0] = to_f(cosp[off]); s[0] = to_f(sinp[off]);
#endif  // kt:bind
      p0[0] = to_f(src[h + lo]); p1[0] = to_f(src[h + (GPTJ ? lo + 1 : hi)]);
    } else {
#if KT_EXPERT_CACHE == 3  // kt:bind
      load_cos_sin_pairs<VEC>(cosp + 2 * off, c, s);
#else  // kt:bind
      load_vec<C, VEC>(cosp + off, c); load_vec<C, VEC>(sinp + off, s);
#endif  // kt:bind
      load_vec<T, VEC>(src + h + lo, p0); load_vec<T, VEC>(src + h + hi, p1);
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
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
#if KT_EXPERT_STORAGE_MATH  // kt:bind
      // each product and each sum rounded to T, as T's own operators do (both exact in fp32 before the rounding)
      const float xc = to_f(from_f<T>(x[j] * c[j])), ys = to_f(from_f<T>(y[j] * s[j]));
      const float yc = to_f(from_f<T>(y[j] * (FULL ? c2[j] : c[j]))), xs = to_f(from_f<T>(x[j] * (FULL ? s2[j] : s[j])));
      const float nx = to_f(from_f<T>(xc - ys));
      const float ny = to_f(from_f<T>(yc + xs));
#else  // kt:bind
      const float nx = x[j] * c[j] - y[j] * s[j];
      const float ny = FULL ? y[j] * c2[j] + x[j] * s2[j] : y[j] * c[j] + x[j] * s[j];
#endif  // kt:bind
      if constexpr (GPTJ) {
        if (2 * j < VEC) p0[2 * j] = nx; else p1[2 * j - VEC] = nx;
        if (2 * j + 1 < VEC) p0[2 * j + 1] = ny; else p1[2 * j + 1 - VEC] = ny;
      } else {
        p0[j] = nx; p1[j] = ny;
      }
    }
    if constexpr (VEC == 1) {
      dst[h + lo] = from_f<T>(p0[0]); dst[h + (GPTJ ? lo + 1 : hi)] = from_f<T>(p1[0]);
    } else {
      store_vec<T, VEC>(dst + h + lo, p0); store_vec<T, VEC>(dst + h + hi, p1);
    }
  }
}

template <typename T>
__device__ __forceinline__ void copy_tail(const T* src, T* dst, int nheads, int head_size, int rot_dim, int first,
                                          int step) {
  const int rest = head_size - rot_dim;
  for (int i = first; i < nheads * rest; i += step) {
    const long long e = (long long)(i / rest) * head_size + rot_dim + i % rest;
    dst[e] = src[e];
  }
}

#if KT_EXPERT_HEAD_MAJOR  // kt:bind
// copy_tail with the heads hstride elements apart (head-major [batch, heads, seq, head_size])
template <typename T>
__device__ __forceinline__ void copy_tail_strided(const T* src, T* dst, int nheads, int head_size, int hstride,
                                                  int rot_dim, int first, int step) {
  const int rest = head_size - rot_dim;
  for (int i = first; i < nheads * rest; i += step) {
    const long long e = (long long)(i / rest) * hstride + rot_dim + i % rest;
    dst[e] = src[e];
  }
}

#endif  // kt:bind
template <int V, typename T, typename C>
__device__ __forceinline__ bool pairs_vec_ok(int embed, int head_size, int stride, const T* a, const T* b,
                                             const T* c, const T* d, const C* cosp, const C* sinp) {
  return vec_ok<T, V>(embed, a, b, c, d) && (head_size % V) == 0 && vec_ok<C, V>(embed, cosp, sinp) &&
         (stride % V) == 0;
}
constexpr int HALF_VEC = KT_VEC >= 4 ? KT_VEC / 2 : 1;
constexpr int QUARTER_VEC = KT_VEC >= 8 ? KT_VEC / 4 : 1;

template <int VEC, bool GPTJ, typename T, typename C>
__device__ __forceinline__ void rotate_token(const T* q_in, const T* k_in, T* q_out, T* k_out, const C* cosp,
                                             const C* sinp, int num_heads, int num_kv_heads, int head_size,
                                             int embed) {
#if KT_EXPERT_CACHE == 6  // kt:bind
  constexpr bool FULL = true;  // angles in rows of rot_dim: each element of a pair has its own
#else  // kt:bind
  constexpr bool FULL = KT_EXPERT_CACHE == 2;
#endif  // kt:bind
#if KT_EXPERT_BLOCK_HEADS  // kt:bind
  // a block of (THREADS / heads, heads) threads: one range over the token's pairs
  const int first = threadIdx.y * blockDim.x + threadIdx.x, step = blockDim.x * blockDim.y;
  rotate_pairs<VEC, GPTJ, FULL>(q_in, q_out, cosp, sinp, num_heads, head_size, embed, first, step);
  rotate_pairs<VEC, GPTJ, FULL>(k_in, k_out, cosp, sinp, num_kv_heads, head_size, embed, first, step);
#else  // kt:bind
  rotate_pairs<VEC, GPTJ, FULL>(q_in, q_out, cosp, sinp, num_heads, head_size, embed, threadIdx.x, blockDim.x);
  rotate_pairs<VEC, GPTJ, FULL>(k_in, k_out, cosp, sinp, num_kv_heads, head_size, embed, threadIdx.x, blockDim.x);
#endif  // kt:bind
}

// positions [tokens]; query [tokens, num_heads, head_size], key [tokens, num_kv_heads, head_size] (num_kv_heads 0:
// no key); cos and sin rows of cache_stride elements, the first rot_dim / 2 used.
template <typename P, typename T, typename C>
__device__ __forceinline__ void rotary_neox(const P* positions, const T* q_in, const T* k_in, T* q_out, T* k_out,
                                            const C* cos_cache, const C* sin_cache, int cache_stride, int rot_dim,
#if KT_EXPERT_TOKEN_STRIDE  // kt:bind
                                            int num_heads, int num_kv_heads, int head_size, long long q_stride,
#if KT_EXPERT_POSITIONS == 2  // kt:bind
                                            long long k_stride, int seq_len) {
#else  // kt:bind
                                            long long k_stride) {
#endif  // kt:bind
#elif KT_EXPERT_POSITIONS == 2  // kt:bind
                                            int num_heads, int num_kv_heads, int head_size, int seq_len) {
#elif KT_EXPERT_POSITIONS == 3  // kt:bind
                                            int num_heads, int num_kv_heads, int head_size, int seq_len,
#if KT_EXPERT_ROW_TOKENS * KT_EXPERT_POS_DIV  // kt:bind
                                            long long pos_offset, long long tokens, long long pos_div) {
#elif KT_EXPERT_ROW_TOKENS  // kt:bind
                                            long long pos_offset, long long tokens) {
#elif KT_EXPERT_POS_DIV  // kt:bind
                                            long long pos_offset, long long pos_div) {
#else  // kt:bind
                                            long long pos_offset) {
#endif  // kt:bind
#elif KT_EXPERT_POSITIONS == 4  // kt:bind
                                            int num_heads, int num_kv_heads, int head_size, int batch) {
#elif KT_EXPERT_HEAD_MAJOR  // kt:bind
                                            int num_heads, int num_kv_heads, int head_size, int seq_len) {
#else  // kt:bind
                                            int num_heads, int num_kv_heads, int head_size) {
#endif  // kt:bind
  constexpr bool GPTJ = KT_EXPERT_PAIRING == 1;
#if KT_EXPERT_ROW_TOKENS  // kt:bind
  const long long token = (long long)blockIdx.x * blockDim.y + threadIdx.y;  // one y row of the block a token
  if (token >= tokens) return;  // the last block's rows past the end (no barrier below)
#else  // kt:bind
  const long long token = blockIdx.x;
#endif  // kt:bind
#if KT_EXPERT_POSITIONS == 0  // kt:bind
  const long long pos = token;
#elif KT_EXPERT_POSITIONS == 2  // kt:bind
  // token t is index t % seq_len of sequence t / seq_len, whose positions start at that sequence's offset
  const long long pos = (long long)positions[token / seq_len] + token % seq_len;
#elif KT_EXPERT_POSITIONS == 3  // kt:bind
#if KT_EXPERT_POS_DIV  // kt:bind
  // no positions: token t (a row of one head) at pos_offset + (t / pos_div) % seq_len (pos_div rows a position)
  const long long pos = pos_offset + (token / pos_div) % seq_len;
#else  // kt:bind
  // no positions: token t is index t % seq_len of its sequence, at that position (from pos_offset on)
  const long long pos = pos_offset + token % seq_len;
#endif  // kt:bind
#elif KT_EXPERT_POSITIONS == 4  // kt:bind
  // no positions, sequence-major [s, batch, ...]: token t is batch entry t % batch at position t / batch
  const long long pos = token / batch;
#else  // kt:bind
  const long long pos = (long long)positions[token];
#endif  // kt:bind
  const C* cosp = cos_cache + pos * cache_stride;
  const C* sinp = sin_cache + pos * cache_stride;
  const int embed = rot_dim / 2;
#if KT_EXPERT_TOKEN_STRIDE  // kt:bind
  const long long qo = token * q_stride, ko = token * k_stride;
#elif KT_EXPERT_HEAD_MAJOR  // kt:bind
  // head-major [batch, heads, seq_len, head_size]: token t is position t % seq_len of batch entry t / seq_len, its
  // heads seq_len * head_size elements apart (the head stride the rotation steps by)
  const long long tb = token / seq_len, ts = token % seq_len;
  const long long qo = (tb * num_heads * seq_len + ts) * head_size, ko = (tb * num_kv_heads * seq_len + ts) * head_size;
  const int hstride = seq_len * head_size;
#else  // kt:bind
  const long long qo = token * num_heads * head_size, ko = token * num_kv_heads * head_size;
#endif  // kt:bind
  const T* qi = q_in + qo;
  const T* ki = k_in + ko;
  T* qd = q_out + qo;
  T* kd = k_out + ko;
#if KT_EXPERT_TOKEN_STRIDE  // kt:bind
  // the widest vector the rotary half, the head, the cache rows and this token's rows allow (a stride may not keep
  // every token aligned: each block checks its own)
  if (pairs_vec_ok<KT_VEC, T, C>(embed, head_size, cache_stride, qi, ki, qd, kd, cos_cache, sin_cache))
    rotate_token<KT_VEC, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, head_size, embed);
  else if (KT_VEC >= 4 && pairs_vec_ok<HALF_VEC, T, C>(embed, head_size, cache_stride, qi, ki, qd, kd, cos_cache,
                                                       sin_cache))
    rotate_token<HALF_VEC, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, head_size, embed);
  else if (KT_VEC >= 8 && pairs_vec_ok<QUARTER_VEC, T, C>(embed, head_size, cache_stride, qi, ki, qd, kd, cos_cache,
                                                          sin_cache))
    rotate_token<QUARTER_VEC, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, head_size, embed);
  else
    rotate_token<1, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, head_size, embed);
#elif KT_EXPERT_HEAD_MAJOR  // kt:bind
  // the widest vector (VEC, then halves of it) that the rotary half, the head, the cache rows and the pointers allow;
  // the heads hstride apart
  if (pairs_vec_ok<KT_VEC, T, C>(embed, head_size, cache_stride, q_in, k_in, q_out, k_out, cos_cache, sin_cache))
    rotate_token<KT_VEC, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, hstride, embed);
  else if (KT_VEC >= 4 &&
           pairs_vec_ok<HALF_VEC, T, C>(embed, head_size, cache_stride, q_in, k_in, q_out, k_out, cos_cache, sin_cache))
    rotate_token<HALF_VEC, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, hstride, embed);
  else if (KT_VEC >= 8 &&
           pairs_vec_ok<QUARTER_VEC, T, C>(embed, head_size, cache_stride, q_in, k_in, q_out, k_out, cos_cache, sin_cache))
    rotate_token<QUARTER_VEC, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, hstride, embed);
  else
    rotate_token<1, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, hstride, embed);
#else  // kt:bind
  // the widest vector (VEC, then halves of it) that the rotary half, the head, the cache rows and the pointers allow
  if (pairs_vec_ok<KT_VEC, T, C>(embed, head_size, cache_stride, q_in, k_in, q_out, k_out, cos_cache, sin_cache))
    rotate_token<KT_VEC, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, head_size, embed);
  else if (KT_VEC >= 4 &&
           pairs_vec_ok<HALF_VEC, T, C>(embed, head_size, cache_stride, q_in, k_in, q_out, k_out, cos_cache, sin_cache))
    rotate_token<HALF_VEC, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, head_size, embed);
  else if (KT_VEC >= 8 &&
           pairs_vec_ok<QUARTER_VEC, T, C>(embed, head_size, cache_stride, q_in, k_in, q_out, k_out, cos_cache, sin_cache))
    rotate_token<QUARTER_VEC, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, head_size, embed);
  else
    rotate_token<1, GPTJ>(qi, ki, qd, kd, cosp, sinp, num_heads, num_kv_heads, head_size, embed);
#endif  // kt:bind
#if KT_EXPERT_OUT_OF_PLACE  // kt:bind
  if (rot_dim < head_size) {
#if KT_EXPERT_BLOCK_HEADS  // kt:bind
    const int first = threadIdx.y * blockDim.x + threadIdx.x, step = blockDim.x * blockDim.y;
    copy_tail(qi, qd, num_heads, head_size, rot_dim, first, step);
    copy_tail(ki, kd, num_kv_heads, head_size, rot_dim, first, step);
#elif KT_EXPERT_HEAD_MAJOR  // kt:bind
    copy_tail_strided(qi, qd, num_heads, head_size, hstride, rot_dim, threadIdx.x, blockDim.x);
    copy_tail_strided(ki, kd, num_kv_heads, head_size, hstride, rot_dim, threadIdx.x, blockDim.x);
#else  // kt:bind
    copy_tail(qi, qd, num_heads, head_size, rot_dim, threadIdx.x, blockDim.x);
    copy_tail(ki, kd, num_kv_heads, head_size, rot_dim, threadIdx.x, blockDim.x);
#endif  // kt:bind
  }
#endif  // kt:bind
}
#if KT_EXPERT_QK_NORM  // kt:bind

// One warp a head (each part's flag is uniform over the block): the head's sum of squares over the warp (lanes
// strided, then shuffles), r = rsqrtf(sum / head_size + eps), each element read times (r * gamma[d]) in fp32 and
// rotated as rotate_pairs does (NeoX or GPT-J pairs, one cache, two, or (cos, sin) pairs), one rounding to T; the
// channels past rot_dim written normalized. Without the norm (norm false) the same rotation, the tail copied out of
// place (in place: left as it is).
template <bool GPTJ, bool FULL, typename T, typename C, typename G>
__device__ __forceinline__ void norm_rotate_heads(const T* src, T* dst, const C* __restrict__ cosp,
                                                  const C* __restrict__ sinp, int nheads, int head_size, int rot_dim,
                                                  const G* gamma, float eps, bool norm) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int embed = rot_dim / 2;
  for (int head = threadIdx.x >> 5; head < nheads; head += warps) {
    const long long h = (long long)head * head_size;
    float r = 1.0f;
    if (norm) {
      float ss = 0.0f;
      for (int d = lane; d < head_size; d += 32) {
        const float v = to_f(src[h + d]);
        ss += v * v;
      }
      ss = warp_reduce<32>(ss, Sum());  // every lane has read its elements before any lane writes (in place)
      r = rsqrtf(ss / (float)head_size + eps);
    }
    for (int i = lane; i < embed; i += 32) {
      const int lo = GPTJ ? 2 * i : i, hi = GPTJ ? 2 * i + 1 : embed + i;
      float x = to_f(src[h + lo]), y = to_f(src[h + hi]);
      if (norm) {
        x *= r * to_f(gamma[lo]);
        y *= r * to_f(gamma[hi]);
      }
#if KT_EXPERT_CACHE == 3  // kt:bind
      const float c = to_f(cosp[2 * i]), s = to_f(cosp[2 * i + 1]);
#else  // kt:bind
      const float c = to_f(cosp[i]), s = to_f(sinp[i]);
#endif  // kt:bind
      const float c2 = FULL ? to_f(cosp[embed + i]) : c, s2 = FULL ? to_f(sinp[embed + i]) : s;
      const float nx = x * c - y * s;
      const float ny = y * c2 + x * s2;
      dst[h + lo] = from_f<T>(nx);
      dst[h + hi] = from_f<T>(ny);
    }
    for (int d = rot_dim + lane; d < head_size; d += 32) {
      if (norm) {
        float v = to_f(src[h + d]);
        v *= r * to_f(gamma[d]);
        dst[h + d] = from_f<T>(v);
      }
#if KT_EXPERT_OUT_OF_PLACE  // kt:bind
      else {
        dst[h + d] = src[h + d];  // out of place: copied
      }
#endif  // kt:bind
    }
  }
}

// The rotation above with each part's RMSNorm behind its run-time flag (true where the kernel's norm has none).
// Neither flag set: the plain vectorized rotation (the rotary_neox above).
template <typename P, typename T, typename C, typename G>
__device__ __forceinline__ void rotary_neox(const P* positions, const T* q_in, const T* k_in, T* q_out, T* k_out,
                                            const C* cos_cache, const C* sin_cache, int cache_stride, int rot_dim,
                                            int num_heads, int num_kv_heads, int head_size,
#if KT_EXPERT_TOKEN_STRIDE  // kt:bind
                                            long long q_stride, long long k_stride,
#endif  // kt:bind
                                            const G* q_gamma, const G* k_gamma, float q_eps, float k_eps,
                                            bool q_norm, bool k_norm) {
  if (!q_norm && !k_norm) {
#if KT_EXPERT_TOKEN_STRIDE  // kt:bind
    rotary_neox<P, T, C>(positions, q_in, k_in, q_out, k_out, cos_cache, sin_cache, cache_stride, rot_dim, num_heads,
                         num_kv_heads, head_size, q_stride, k_stride);
#else  // kt:bind
    rotary_neox<P, T, C>(positions, q_in, k_in, q_out, k_out, cos_cache, sin_cache, cache_stride, rot_dim, num_heads,
                         num_kv_heads, head_size);
#endif  // kt:bind
    return;
  }
  constexpr bool GPTJ = KT_EXPERT_PAIRING == 1;
  constexpr bool FULL = KT_EXPERT_CACHE == 2;
  const long long token = blockIdx.x;
#if KT_EXPERT_POSITIONS == 0  // kt:bind
  const long long pos = token;
#else  // kt:bind
  const long long pos = (long long)positions[token];
#endif  // kt:bind
  const C* cosp = cos_cache + pos * cache_stride;
  const C* sinp = sin_cache + pos * cache_stride;
#if KT_EXPERT_TOKEN_STRIDE  // kt:bind
  const long long qo = token * q_stride, ko = token * k_stride;
#else  // kt:bind
  const long long qo = token * num_heads * head_size, ko = token * num_kv_heads * head_size;
#endif  // kt:bind
  norm_rotate_heads<GPTJ, FULL>(q_in + qo, q_out + qo, cosp, sinp, num_heads, head_size, rot_dim, q_gamma, q_eps,
                                q_norm);
  norm_rotate_heads<GPTJ, FULL>(k_in + ko, k_out + ko, cosp, sinp, num_kv_heads, head_size, rot_dim, k_gamma, k_eps,
                                k_norm);
}
#endif  // kt:bind
#if KT_EXPERT_CACHE == 4  // kt:bind

// No cache: cos and sin of pair i (of rot_dim / 2) of a token at `pos`, as the kernel computes them: theta = pos *
// inv_freq(i) * scale, each of cos and sin then multiplied by attn.
__device__ __forceinline__ float rope_pow(float base, float e) {
#if KT_EXPERT_FAST_ANGLE  // kt:bind
  return __powf(base, e);
#else  // kt:bind
  return powf(base, e);
#endif  // kt:bind
}

__device__ __forceinline__ void rope_angle(float pos, int i, int rot_dim, float base, float scale, float attn,
                                           float& c, float& s) {
#if KT_EXPERT_ANGLE == 0  // kt:bind
  const float inv = rope_pow(base, -(float)(2 * i) / (float)rot_dim);
#elif KT_EXPERT_ANGLE == 1  // kt:bind
  const float inv = rope_pow(base, (float)i);
#elif KT_EXPERT_ANGLE == 2  // kt:bind
  const float inv = 1.0f / rope_pow(base, (float)(2 * i) / (float)rot_dim);
#elif KT_EXPERT_ANGLE == 4  // kt:bind
  // a double literal over the float power: the reciprocal and its product with the position in double, rounded to
  // float once (DeepSpeed's 1.0 / powf(rope_theta, 2i / rot) * (float)pos)
  const float angle = (float)(1.0 / (double)rope_pow(base, (float)(2 * i) / (float)rot_dim) * (double)pos);
#else  // kt:bind
  const float inv = rope_pow(base, (float)(2 * i) / (float)rot_dim);
#endif  // kt:bind
#if KT_EXPERT_ANGLE == 4  // kt:bind
  const float theta = angle * scale;
#else  // kt:bind
  const float theta = pos * inv * scale;
#endif  // kt:bind
#if KT_EXPERT_FAST_ANGLE  // kt:bind
  __sincosf(theta, &s, &c);
#else  // kt:bind
  c = cosf(theta);
  s = sinf(theta);
#endif  // kt:bind
  c *= attn;
  s *= attn;
}

constexpr int ANGLE_TABLE = 512;  // pairs whose cos and sin a block keeps in shared memory (rot_dim <= 1024)

// Rotary wider than the table: each pair's angle computed where it is used, scalar.
template <bool GPTJ, typename T>
__device__ __forceinline__ void rotate_direct(const T* src, T* dst, float pos, int nheads, int head_size, int embed,
                                              int rot_dim, float base, float scale, float attn) {
  for (int i = threadIdx.x; i < nheads * embed; i += blockDim.x) {
    const int head = i / embed, j = i - head * embed;
    float c, s;
    rope_angle(pos, j, rot_dim, base, scale, attn, c, s);
    const long long h = (long long)head * head_size;
    const int lo = GPTJ ? 2 * j : j, hi = GPTJ ? 2 * j + 1 : embed + j;
    const float x = to_f(src[h + lo]), y = to_f(src[h + hi]);
    dst[h + lo] = from_f<T>(x * c - y * s);
    dst[h + hi] = from_f<T>(y * c + x * s);
  }
}

#if KT_EXPERT_POSITIONS == 3  // kt:bind
// VEC pairs of one head at lo and hi (NeoX: hi = lo + rot_dim / 2; GPT-J: the pairs (2i, 2i + 1) of the 2 VEC elements
// from lo, hi = lo + VEC) rotated by cos c and sin s, read from src, written to dst.
template <int VEC, bool GPTJ, typename T>
__device__ __forceinline__ void rotate_vec(const T* src, T* dst, int lo, int hi, const float* c, const float* s) {
  float p0[VEC], p1[VEC];
  if constexpr (VEC == 1) {
    p0[0] = to_f(src[lo]); p1[0] = to_f(src[GPTJ ? lo + 1 : hi]);
  } else {
    load_vec<T, VEC>(src + lo, p0); load_vec<T, VEC>(src + hi, p1);
  }
  float x[VEC], y[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    x[j] = GPTJ ? (2 * j < VEC ? p0[2 * j] : p1[2 * j - VEC]) : p0[j];
    y[j] = GPTJ ? (2 * j + 1 < VEC ? p0[2 * j + 1] : p1[2 * j + 1 - VEC]) : p1[j];
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float nx = x[j] * c[j] - y[j] * s[j];
    const float ny = y[j] * c[j] + x[j] * s[j];
    if constexpr (GPTJ) {
      if (2 * j < VEC) p0[2 * j] = nx; else p1[2 * j - VEC] = nx;
      if (2 * j + 1 < VEC) p0[2 * j + 1] = ny; else p1[2 * j + 1 - VEC] = ny;
    } else {
      p0[j] = nx; p1[j] = ny;
    }
  }
  if constexpr (VEC == 1) {
    dst[lo] = from_f<T>(p0[0]); dst[GPTJ ? lo + 1 : hi] = from_f<T>(p1[0]);
  } else {
    store_vec<T, VEC>(dst + lo, p0); store_vec<T, VEC>(dst + hi, p1);
  }
}

// One token's query heads (q_in -> q_out) and key heads (k_in -> k_out), VEC pairs a step from `first` by `step`:
// each step's angles computed once (rope_angle) for the query head and the key head of that index alike.
template <int VEC, bool GPTJ, typename T>
__device__ __forceinline__ void rotate_token_computed(const T* q_in, const T* k_in, T* q_out, T* k_out, float pos,
                                                      int num_heads, int num_kv_heads, int head_size, int rot_dim,
                                                      float base, float scale, float attn, int first, int step) {
  const int embed = rot_dim / 2, chunks = embed / VEC;
  const int heads = num_heads > num_kv_heads ? num_heads : num_kv_heads;
  for (int i = first; i < heads * chunks; i += step) {
    const int head = i / chunks, off = (i - head * chunks) * VEC;
    float c[VEC], s[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) rope_angle(pos, off + j, rot_dim, base, scale, attn, c[j], s[j]);
    const long long h = (long long)head * head_size;
    const int lo = GPTJ ? 2 * off : off, hi = GPTJ ? 2 * off + VEC : embed + off;
    if (head < num_heads) rotate_vec<VEC, GPTJ>(q_in + h, q_out + h, lo, hi, c, s);
    if (head < num_kv_heads) rotate_vec<VEC, GPTJ>(k_in + h, k_out + h, lo, hi, c, s);
  }
}

// No positions and no cache (DeepSpeed's apply_rotary_pos_half over head-major [batch * heads, seq, head_size]; a
// token-major [batch, seq, heads, head_size] alike): token t is index t % seq_len of its sequence, at position
// pos_offset + t % seq_len, its angles computed where they are used (no table: a token of one head uses each once).
// The query's token t is row t of [tokens, num_heads * head_size]; the key's is row t of [tokens, num_kv_heads *
// head_size], or with KT_EXPERT_KEY_ROWS row (t / seq_len) * key_seq + t % seq_len: the keys inside a KV cache of
// key_seq rows a sequence (DeepSpeed's max_out_tokens), the new tokens' rows at its start. With KT_EXPERT_ROW_TOKENS a
// warp a token (the block (32, THREADS / 32)), else a block a token.
template <typename P, typename T, typename C>
__device__ __forceinline__ void rotary_neox(const P* positions, const T* q_in, const T* k_in, T* q_out, T* k_out,
                                            float base, float scale, float attn, int rot_dim, int num_heads,
                                            int num_kv_heads, int head_size, int seq_len,
#if KT_EXPERT_KEY_ROWS * KT_EXPERT_ROW_TOKENS  // kt:bind
                                            long long pos_offset, long long key_seq, long long tokens) {
#elif KT_EXPERT_KEY_ROWS  // kt:bind
                                            long long pos_offset, long long key_seq) {
#elif KT_EXPERT_ROW_TOKENS  // kt:bind
                                            long long pos_offset, long long tokens) {
#else  // kt:bind
                                            long long pos_offset) {
#endif  // kt:bind
  constexpr bool GPTJ = KT_EXPERT_PAIRING == 1;
#if KT_EXPERT_ROW_TOKENS  // kt:bind
  const long long token = (long long)blockIdx.x * blockDim.y + threadIdx.y;  // one y row of the block a token
  if (token >= tokens) return;  // the last block's rows past the end (no barrier here)
  const int first = threadIdx.x, step = blockDim.x;
#elif KT_EXPERT_BLOCK_HEADS  // kt:bind
  // the heads only the launch counts: a block of (THREADS / heads, heads), num_heads read back from blockDim.y by the
  // wrapper; its threads one range over the token's pairs
  const long long token = blockIdx.x;
  const int first = threadIdx.y * blockDim.x + threadIdx.x, step = blockDim.x * blockDim.y;
#else  // kt:bind
  const long long token = blockIdx.x;
  const int first = threadIdx.x, step = blockDim.x;
#endif  // kt:bind
#if KT_EXPERT_SEQ_OFFSETS  // kt:bind
  const float pos = (float)(pos_offset + (long long)positions[token / seq_len] + token % seq_len);
#else  // kt:bind
  const float pos = (float)(pos_offset + token % seq_len);
#endif  // kt:bind
  const long long qo = token * num_heads * head_size;
#if KT_EXPERT_KEY_ROWS  // kt:bind
  const long long ko = ((token / seq_len) * key_seq + token % seq_len) * num_kv_heads * head_size;
#else  // kt:bind
  const long long ko = token * num_kv_heads * head_size;
#endif  // kt:bind
  const T* qi = q_in + qo;
  const T* ki = k_in + ko;
  T* qd = q_out + qo;
  T* kd = k_out + ko;
  const int embed = rot_dim / 2;
  // the widest vector (VEC, then halves of it) the rotary half, the head and the pointers allow
  if (vec_ok<T, KT_VEC>(embed, q_in, k_in, q_out, k_out) && head_size % KT_VEC == 0)
    rotate_token_computed<KT_VEC, GPTJ>(qi, ki, qd, kd, pos, num_heads, num_kv_heads, head_size, rot_dim, base,
                                        scale, attn, first, step);
  else if (KT_VEC >= 4 && vec_ok<T, HALF_VEC>(embed, q_in, k_in, q_out, k_out) && head_size % HALF_VEC == 0)
    rotate_token_computed<HALF_VEC, GPTJ>(qi, ki, qd, kd, pos, num_heads, num_kv_heads, head_size, rot_dim, base,
                                          scale, attn, first, step);
  else if (KT_VEC >= 8 && vec_ok<T, QUARTER_VEC>(embed, q_in, k_in, q_out, k_out) && head_size % QUARTER_VEC == 0)
    rotate_token_computed<QUARTER_VEC, GPTJ>(qi, ki, qd, kd, pos, num_heads, num_kv_heads, head_size, rot_dim, base,
                                             scale, attn, first, step);
  else
    rotate_token_computed<1, GPTJ>(qi, ki, qd, kd, pos, num_heads, num_kv_heads, head_size, rot_dim, base, scale,
                                   attn, first, step);
#if KT_EXPERT_OUT_OF_PLACE  // kt:bind
  if (rot_dim < head_size) {
    copy_tail(qi, qd, num_heads, head_size, rot_dim, first, step);
    copy_tail(ki, kd, num_kv_heads, head_size, rot_dim, first, step);
  }
#endif  // kt:bind
}
#else  // kt:bind
// positions [tokens]; query [tokens, num_heads, head_size], key [tokens, num_kv_heads, head_size] (num_kv_heads 0:
// no key); no cache: the token's rot_dim / 2 angles computed once into shared memory (not once per head), then
// every head of the token rotated by them as by a cache of one row (the rotary_neox above, stride 0).
template <typename P, typename T, typename C>
__device__ __forceinline__ void rotary_neox(const P* positions, const T* q_in, const T* k_in, T* q_out, T* k_out,
                                            float base, float scale, float attn, int rot_dim, int num_heads,
#if KT_EXPERT_TOKEN_STRIDE  // kt:bind
                                            int num_kv_heads, int head_size, long long q_stride, long long k_stride) {
#else  // kt:bind
                                            int num_kv_heads, int head_size) {
#endif  // kt:bind
  __shared__ __align__(32) float cos_t[ANGLE_TABLE];
  __shared__ __align__(32) float sin_t[ANGLE_TABLE];
  const float pos = (float)positions[blockIdx.x];
  const int embed = rot_dim / 2;
  if (embed <= ANGLE_TABLE) {
    for (int j = threadIdx.x; j < embed; j += blockDim.x) rope_angle(pos, j, rot_dim, base, scale, attn, cos_t[j], sin_t[j]);
    __syncthreads();
#if KT_EXPERT_TOKEN_STRIDE  // kt:bind
    // query and key heads as views of one fused row (tokens q_stride / k_stride apart): the cache path's strides
    rotary_neox<P, T, float>(positions, q_in, k_in, q_out, k_out, cos_t, sin_t, 0, rot_dim, num_heads, num_kv_heads,
                             head_size, q_stride, k_stride);
#else  // kt:bind
    rotary_neox<P, T, float>(positions, q_in, k_in, q_out, k_out, cos_t, sin_t, 0, rot_dim, num_heads, num_kv_heads,
                             head_size);
#endif  // kt:bind
    return;
  }
  constexpr bool GPTJ = KT_EXPERT_PAIRING == 1;
#if KT_EXPERT_TOKEN_STRIDE  // kt:bind
  const long long qo = blockIdx.x * q_stride, ko = blockIdx.x * k_stride;
#else  // kt:bind
  const long long qo = blockIdx.x * (long long)num_heads * head_size, ko = blockIdx.x * (long long)num_kv_heads * head_size;
#endif  // kt:bind
  rotate_direct<GPTJ>(q_in + qo, q_out + qo, pos, num_heads, head_size, embed, rot_dim, base, scale, attn);
  rotate_direct<GPTJ>(k_in + ko, k_out + ko, pos, num_kv_heads, head_size, embed, rot_dim, base, scale, attn);
#if KT_EXPERT_OUT_OF_PLACE  // kt:bind
  if (rot_dim < head_size) {
    copy_tail(q_in + qo, q_out + qo, num_heads, head_size, rot_dim, threadIdx.x, blockDim.x);
    copy_tail(k_in + ko, k_out + ko, num_kv_heads, head_size, rot_dim, threadIdx.x, blockDim.x);
  }
#endif  // kt:bind
}
#if KT_EXPERT_ANGLE_SMOOTH  // kt:bind

// Llama 3.1's frequency rescaling computed in the kernel (FlashInfer's BatchQKApplyLlama31Rotary*): pair i's inverse
// frequency f (as the kernel forms it), s = clamp(f * smooth_a + smooth_b, 0, 1), f' = (1 - s) * (f * scale) + s * f
// (interpolated by scale where s is 0, kept where it is 1), theta = pos * f'; each of cos and sin times attn.
__device__ __forceinline__ void rope_angle_smooth(float pos, int i, int rot_dim, float base, float scale, float attn,
                                                  float smooth_a, float smooth_b, float& c, float& s) {
#if KT_EXPERT_ANGLE == 0  // kt:bind
  float f = rope_pow(base, -(float)(2 * i) / (float)rot_dim);
#elif KT_EXPERT_ANGLE == 1  // kt:bind
  float f = rope_pow(base, (float)i);
#elif KT_EXPERT_ANGLE == 2  // kt:bind
  float f = 1.0f / rope_pow(base, (float)(2 * i) / (float)rot_dim);
#else  // kt:bind
  float f = rope_pow(base, (float)(2 * i) / (float)rot_dim);
#endif  // kt:bind
  float smooth = f * smooth_a + smooth_b;
  smooth = fmaxf(0.0f, fminf(1.0f, smooth));
  f = (1 - smooth) * (f * scale) + smooth * f;
  const float theta = pos * f;
#if KT_EXPERT_FAST_ANGLE  // kt:bind
  __sincosf(theta, &s, &c);
#else  // kt:bind
  c = cosf(theta);
  s = sinf(theta);
#endif  // kt:bind
  c *= attn;
  s *= attn;
}

// The token's rot_dim / 2 smoothed angles computed once into shared memory, every head rotated by them (as above);
// a rotary wider than the table rotates each pair where its angle is computed.
template <typename P, typename T, typename C>
__device__ __forceinline__ void rotary_neox(const P* positions, const T* q_in, const T* k_in, T* q_out, T* k_out,
                                            float base, float scale, float attn, int rot_dim, int num_heads,
                                            int num_kv_heads, int head_size, float smooth_a, float smooth_b) {
  __shared__ __align__(32) float cos_t[ANGLE_TABLE];
  __shared__ __align__(32) float sin_t[ANGLE_TABLE];
  const float pos = (float)positions[blockIdx.x];
  const int embed = rot_dim / 2;
  if (embed <= ANGLE_TABLE) {
    for (int j = threadIdx.x; j < embed; j += blockDim.x)
      rope_angle_smooth(pos, j, rot_dim, base, scale, attn, smooth_a, smooth_b, cos_t[j], sin_t[j]);
    __syncthreads();
    rotary_neox<P, T, float>(positions, q_in, k_in, q_out, k_out, cos_t, sin_t, 0, rot_dim, num_heads, num_kv_heads,
                             head_size);
    return;
  }
  constexpr bool GPTJ = KT_EXPERT_PAIRING == 1;
  for (int part = 0; part < 2; ++part) {  // the query heads, then the key heads
    const int nheads = part == 0 ? num_heads : num_kv_heads;
    const long long o = blockIdx.x * (long long)nheads * head_size;
    const T* src = (part == 0 ? q_in : k_in) + o;
    T* dst = (part == 0 ? q_out : k_out) + o;
    for (int i = threadIdx.x; i < nheads * embed; i += blockDim.x) {
      const int head = i / embed, j = i - head * embed;
      float c, s;
      rope_angle_smooth(pos, j, rot_dim, base, scale, attn, smooth_a, smooth_b, c, s);
      const long long h = (long long)head * head_size;
      const int lo = GPTJ ? 2 * j : j, hi = GPTJ ? 2 * j + 1 : embed + j;
      const float x = to_f(src[h + lo]), y = to_f(src[h + hi]);
      dst[h + lo] = from_f<T>(x * c - y * s);
      dst[h + hi] = from_f<T>(y * c + x * s);
    }
#if KT_EXPERT_OUT_OF_PLACE  // kt:bind
    if (rot_dim < head_size) copy_tail(src, dst, nheads, head_size, rot_dim, threadIdx.x, blockDim.x);
#endif  // kt:bind
  }
}
#endif  // kt:bind
#endif  // kt:bind
#endif  // kt:bind
#if KT_EXPERT_CACHE >= 5  // kt:bind

// An angles tensor (Transformer Engine's and Megatron's freqs: position * inv_freq, fp32): each angle's cos and sin
// computed as the kernel does (sincosf, or the fast __sincosf where the kernel uses it).
__device__ __forceinline__ void angle_cos_sin(float a, float& c, float& s) {
#if KT_EXPERT_FAST_ANGLE  // kt:bind
  __sincosf(a, &s, &c);
#else  // kt:bind
  sincosf(a, &s, &c);
#endif  // kt:bind
}

constexpr int ANGLES_TABLE = 1024;  // angles of a row whose cos and sin a block keeps in shared memory

// A row of angles wider than the table: each pair's cos and sin computed where they are used, scalar.
template <bool GPTJ, typename T>
#if KT_EXPERT_CACHE == 7  // kt:bind
__device__ __forceinline__ void rotate_angles_direct(const T* src, T* dst, const float* row, int nheads,
                                                     int head_size, int embed, float fpos) {
#else  // kt:bind
__device__ __forceinline__ void rotate_angles_direct(const T* src, T* dst, const float* row, int nheads,
                                                     int head_size, int embed) {
#endif  // kt:bind
  for (int i = threadIdx.x; i < nheads * embed; i += blockDim.x) {
    const int head = i / embed, j = i - head * embed;
    float c, s, c2, s2;
#if KT_EXPERT_CACHE == 7  // kt:bind
    angle_cos_sin(fpos * row[j], c, s);
#else  // kt:bind
    angle_cos_sin(row[j], c, s);
#endif  // kt:bind
#if KT_EXPERT_CACHE == 6  // kt:bind
    angle_cos_sin(row[embed + j], c2, s2);
#else  // kt:bind
    c2 = c;
    s2 = s;
#endif  // kt:bind
    const long long h = (long long)head * head_size;
    const int lo = GPTJ ? 2 * j : j, hi = GPTJ ? 2 * j + 1 : embed + j;
    const float x = to_f(src[h + lo]), y = to_f(src[h + hi]);
    dst[h + lo] = from_f<T>(x * c - y * s);
    dst[h + hi] = from_f<T>(y * c2 + x * s2);
  }
}

// positions [tokens] (or none: KT_EXPERT_POSITIONS); query [tokens, num_heads, head_size], key [tokens, num_kv_heads,
// head_size] (num_kv_heads 0: no key); angles [max_position, angle_stride] fp32: rot_dim / 2 a row (one angle a pair,
// KT_EXPERT_CACHE 5) or rot_dim (each element its own, the two halves of a NeoX row: KT_EXPERT_CACHE 6). The token's
// row of angles turned into cos and sin once into shared memory, then every head rotated by them as by a cache of
// one row (the rotary_neox above, stride 0).
template <typename P, typename T, typename C>
__device__ __forceinline__ void rotary_neox(const P* positions, const T* q_in, const T* k_in, T* q_out, T* k_out,
                                            const float* angles, int angle_stride, int rot_dim,
#if KT_EXPERT_POSITIONS == 3  // kt:bind
                                            int num_heads, int num_kv_heads, int head_size, int seq_len,
                                            long long pos_offset) {
#elif KT_EXPERT_POSITIONS == 4  // kt:bind
                                            int num_heads, int num_kv_heads, int head_size, int batch) {
#else  // kt:bind
                                            int num_heads, int num_kv_heads, int head_size) {
#endif  // kt:bind
  __shared__ __align__(32) float cos_t[ANGLES_TABLE];
  __shared__ __align__(32) float sin_t[ANGLES_TABLE];
  const long long token = blockIdx.x;
#if KT_EXPERT_POSITIONS == 0  // kt:bind
  const long long pos = token;
#elif KT_EXPERT_POSITIONS == 3  // kt:bind
  const long long pos = pos_offset + token % seq_len;
#elif KT_EXPERT_POSITIONS == 4  // kt:bind
  const long long pos = token / batch;
#else  // kt:bind
  const long long pos = (long long)positions[token];
#endif  // kt:bind
#if KT_EXPERT_CACHE == 7  // kt:bind
  const float* row = angles;  // the inverse frequencies: one row for every position
  const float fpos = (float)pos;
  if (angle_stride <= ANGLES_TABLE) {
    for (int j = threadIdx.x; j < angle_stride; j += blockDim.x) angle_cos_sin(fpos * row[j], cos_t[j], sin_t[j]);
#else  // kt:bind
  const float* row = angles + pos * angle_stride;
  if (angle_stride <= ANGLES_TABLE) {
    for (int j = threadIdx.x; j < angle_stride; j += blockDim.x) angle_cos_sin(row[j], cos_t[j], sin_t[j]);
#endif  // kt:bind
    __syncthreads();
#if KT_EXPERT_POSITIONS == 3  // kt:bind
    rotary_neox<P, T, float>(positions, q_in, k_in, q_out, k_out, cos_t, sin_t, 0, rot_dim, num_heads, num_kv_heads,
                             head_size, seq_len, pos_offset);
#elif KT_EXPERT_POSITIONS == 4  // kt:bind
    rotary_neox<P, T, float>(positions, q_in, k_in, q_out, k_out, cos_t, sin_t, 0, rot_dim, num_heads, num_kv_heads,
                             head_size, batch);
#else  // kt:bind
    rotary_neox<P, T, float>(positions, q_in, k_in, q_out, k_out, cos_t, sin_t, 0, rot_dim, num_heads, num_kv_heads,
                             head_size);
#endif  // kt:bind
    return;
  }
  constexpr bool GPTJ = KT_EXPERT_PAIRING == 1;
  const int embed = rot_dim / 2;
  const long long qo = token * (long long)num_heads * head_size, ko = token * (long long)num_kv_heads * head_size;
#if KT_EXPERT_CACHE == 7  // kt:bind
  rotate_angles_direct<GPTJ>(q_in + qo, q_out + qo, row, num_heads, head_size, embed, fpos);
  rotate_angles_direct<GPTJ>(k_in + ko, k_out + ko, row, num_kv_heads, head_size, embed, fpos);
#else  // kt:bind
  rotate_angles_direct<GPTJ>(q_in + qo, q_out + qo, row, num_heads, head_size, embed);
  rotate_angles_direct<GPTJ>(k_in + ko, k_out + ko, row, num_kv_heads, head_size, embed);
#endif  // kt:bind
#if KT_EXPERT_OUT_OF_PLACE  // kt:bind
  if (rot_dim < head_size) {
    copy_tail(q_in + qo, q_out + qo, num_heads, head_size, rot_dim, threadIdx.x, blockDim.x);
    copy_tail(k_in + ko, k_out + ko, num_kv_heads, head_size, rot_dim, threadIdx.x, blockDim.x);
  }
#endif  // kt:bind
}
#endif  // kt:bind
#endif  // kt:bind

}  // namespace kt
