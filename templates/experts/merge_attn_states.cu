/* kerntune-expert:
name = "merge_attn_states"
family = "merge_attn_states"
description = "Merge two partial attention outputs with their log-sum-exps: out = p * e^(lp - m) / S + s * e^(ls - m) / S with S = e^(lp - m) + e^(ls - m), out_lse = log(S) + m. 16-byte loads, several independent vectors per thread loaded before any is combined, 32-bit indexing where it fits."
function = "kt::merge_attn_states"
roles = ["out: out T[tokens * heads * head_size]", "out_lse: out f32[tokens * heads] (optional)", "p: in T[tokens * heads * head_size]", "p_lse: in f32[tokens * heads]", "s: in T[tokens * heads * head_size]", "s_lse: in f32[tokens * heads]", "tokens: i32", "heads: i32", "head_size: i32"]
constraints = ["VEC * ESIZE <= 16"]

[params.THREADS]
values = [64, 128, 256, 512, 1024]
default = 128
kind = "block_size"
why = "threads per block"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load/store: 16 bytes at most; where head_size or a pointer does not allow VEC, the widest half of it that does (down to scalar)"

[params.ITEMS]
values = [1, 2, 4, 8]
default = 1
kind = "items_per_thread"
why = "vectors per thread, all loaded before any is combined (more loads in flight); the grid is sized for ITEMS vectors per thread"

[launch]
grid = ["cdiv(tokens * heads * head_size, THREADS * VEC * ITEMS)"]
block = ["THREADS"]
smem = "0"
*/
// kt:bind KT_EXPERT_LSE_BASE2 = 0  (0: natural log-sum-exps (expf, logf), 1: base 2 (exp2f, log2f))
// kt:bind KT_EXPERT_OUT_TYPE = 0  (0: the output of the values' type; 1: of a type of its own, O (fp32 partials merged into a bf16 output, as flash-decoding combines write))
// kt:bind KT_EXPERT_TOKENS_FROM_GRID = 0  (0: the token count is an argument, 1: the kernel has none: the grid is tokens times the blocks one token needs, and the count is read from gridDim.x)
// kt:bind KT_EXPERT_STATE = 0  (0: each state one log-sum-exp; 1: each state a running max m and a sum of exponentials l kept apart (FlashAttention's online-softmax state, vLLM's paged-attention max_logits and exp_sums, TensorRT-LLM's multi-block partial max and sum), each partial value normalized by its own l: w = l * e^(m - max) (max 0 where both are -inf), out = p * (w_p / W) + s * (w_s / W) with W = w_p + w_s (1 / W taken once, 0 where W is 0), the merged m the max and l = W; the lse pointers are then the maxima, out_l, p_l, s_l the sums; 2: the same states, each state's (m, l) interleaved as pairs in one fp32 array [rows, 2] (a float2 per row: TensorRT-LLM's MLA chunked-prefill softmax stats): row r's pair at 2r and 2r + 1, the binding passing the array as the maxima and one element past it as the sums (or the reverse for (l, m) pairs), each read and written at 2r)
// kt:bind KT_EXPERT_EXP2_LOG2E = 0  (with KT_EXPERT_STATE 1 and natural maxima: 0: e^x as expf(x), 1: as exp2f(x * log2(e)), the way the FlashAttention kernels take it)
// kt:bind KT_EXPERT_INPLACE = 0  (0: out of place; 1: in place, FlashInfer's merge_state_in_place: the first state (v, v_lse) becomes its merge with the other (o, o_lse) where a per-token mask (any integer or bool type, nullptr: every token) is nonzero, a token whose entry is 0 keeping its values and lse; one warp a (token, head) row, its merged lse written by lane 0 after __syncwarp (every lane has read the old one); weights e^(lse - max) over their sum, neither lse special-cased; the function is then merge_attn_states<T, M>(v, v_lse, o, o_lse, tokens, heads, head_size, mask), launched as [tokens, head groups of THREADS / 32 * ITEMS])
// kt:bind KT_EXPERT_NWAY = 0  (0: two states; an N-way merge of `sets` states of one row (FlashInfer's MergeStates, a cascade / split-KV reduction; SGLang's and FlashAttention's split combines): one values input and one fp32 lse input holding every state, 1: laid out [tokens, sets, heads, (head_size)] (FlashInfer), 2: [sets, tokens, heads, (head_size)] (split-major, FlashAttention's out_accum / lse_accum), 3: [tokens, heads, sets, (head_size)] (SGLang's decode att_out / att_lse); merged online over the states in order, as FlashInfer's state_t::merge: m' = fmaxf(m, s), a = e^(m - m'), b = e^(s - m'), d = fma(d, a, b), o = fma(o, a, v * b) (exp2f / expf by KT_EXPERT_LSE_BASE2), a state whose lse is -inf skipped; out = o * (1 / d) (0 where d is 0) rounded once to O; the merged lse (out_lse, optional: nullptr) m + log(d), -inf where d is 0, [tokens, heads] or [heads, tokens] by KT_EXPERT_LSE_TOKEN_MAJOR; the function is then merge_attn_states<T, O>(out, out_lse, v, v_lse, sets, tokens, heads, head_size); one warp a (token, head) row on a [tokens, head groups of THREADS / 32] grid, ITEMS states loaded before any is combined)
// kt:bind KT_EXPERT_NWAY_COUNT = 0  (with KT_EXPERT_NWAY: 0: every row merges `sets` states; 1: flash-decoding's per-sequence split count: the rows of token b merge the first min(sets, ceil(lens[b] / split)) of its states (none where lens[b] <= 0), lens an integer buffer [tokens] (its type L: the sequence lengths), split the keys a state covers (lightllm's and SGLang's BLOCK_SEQ, vLLM's PARTITION_SIZE), `sets` then only the states' stride (the allocation); the function is then merge_attn_states<T, O, L>(out, out_lse, v, v_lse, sets, tokens, heads, head_size, lens, split))
// kt:bind KT_EXPERT_NWAY_GRID = 0  (with KT_EXPERT_NWAY: 0: a block THREADS / 32 heads of one token; 1: the kernel has neither a token nor a head count: the expert is launched [tokens, heads] with one warp a block (lightllm's stage-2 grid (batch, head_num)), the counts read back from gridDim.x and gridDim.y)
// kt:bind KT_EXPERT_NWAY_SEQ = 0  (with KT_EXPERT_NWAY 2 (split-major): 0: each state's lse laid out like its rows, [tokens, heads] or [heads, tokens]; 1: the lse of each state (and the merged lse) [batch, heads, seq] while the values are [batch, seq, heads, head_size], tokens = batch * seq: FlashAttention's softmax_lse layout [b, h, s] beside its [b, s, h, d] output (xFormers' merge_attentions: lse_split [splits, B, H, M], attn_split [splits, B, M, H, K]); the function then takes seq, the tokens of one batch, after head_size)
// kt:bind KT_EXPERT_NWAY_ML = 0  (with KT_EXPERT_NWAY (the states' layout, the (m, l) of state k where its lse would be): 0: each state a log-sum-exp; each state UNNORMALIZED values (sum_j e^(s_j - m) v_j, not divided by their own sum) with the running max m and row sum l of its scores (llama.cpp's flash_attn_combine_results with its float2 VKQ_meta, split-KV decode combines that keep the accumulator unnormalized): M = fmaxf of the row's maxima, w_k = e^(m_k - M) (expf / exp2f / exp2f of times log2(e) by KT_EXPERT_LSE_BASE2 and KT_EXPERT_EXP2_LOG2E), out = (sum_k w_k v_k) / (sum_k w_k l_k), both sums fused in state order (fma(w, v, o), fma(w, l, d), what nvcc makes of `o += w * v`), one IEEE division an element, rounded once to O; no state special-cased. 1: m and l the two floats of one pair (float2 metas: element stride 2, the call passes a pointer to each one's first), 2: two arrays. The function is then merge_attn_states<T, O>(out, v, m, l, sets, tokens, heads, head_size, ftz), one warp a row on a 1-D grid of cdiv(tokens * heads, THREADS / 32) blocks)
// kt:bind KT_EXPERT_NWAY_SUMS = 0  (with KT_EXPERT_NWAY (the states' layout, (m, l) of state k where its lse would be), not with KT_EXPERT_NWAY_ML: 0: each state a log-sum-exp; each state NORMALIZED values (divided by their own sum) with the max m and the sum l of its scores in two arrays (vLLM's paged-attention v2 reduce: max_logits, exp_sums beside tmp_out): M = the max of the row's maxima, w_k = l_k * e^(m_k - M) (expf / exp2f by KT_EXPERT_LSE_BASE2 and KT_EXPERT_EXP2_LOG2E), W = sum_k w_k, out = sum over the states in order of v_k * w_k * inv, inv = 1 / (W + eps) taken once, rounded once to O; 1: that inverse an IEEE division, 2: __fdividef(1, W + eps). The function is then merge_attn_states<T, O, L>(out, v, m, l, sets, tokens, heads, head_size, lens, split, eps): lens (nullptr: every row merges `sets` states) and split as KT_EXPERT_NWAY_COUNT reads them; launched as KT_EXPERT_NWAY (and KT_EXPERT_NWAY_GRID))
// kt:bind KT_EXPERT_NWAY_FTZ = 0  (with KT_EXPERT_NWAY_ML: 0: no weight flushed; w_k = e^(diff), diff = m_k - M, flushed to +0 as the kernel writes the test: 1: kept where diff > ftz (ggml's SOFTMAX_FTZ_THRESHOLD mask, -20: a NaN difference flushed), 2: kept where diff >= ftz (a NaN flushed), 3: flushed where diff <= ftz (a NaN kept), 4: flushed where diff < ftz (a NaN kept))
// kt:bind KT_EXPERT_NWAY_ROWS_FROM_LAUNCH = 0  (with KT_EXPERT_NWAY_ML: 0: the rows are tokens * heads of the arguments; 1: the kernel has no row count (ggml's 3-D grid read back as its sizes): launched with cdiv(rows, THREADS / 32) blocks and the last block's rows (1 to THREADS / 32) as its dynamic shared memory size in bytes, memory it never uses; the rows come back exactly, (gridDim.x - 1) * THREADS / 32 + %dynamic_smem_size, and tokens = rows / heads)
// kt:bind KT_EXPERT_NWAY_ML_NORM = 0  (with KT_EXPERT_NWAY_ML: 0: out = (sum_k w_k v_k) / (sum_k w_k l_k), one division an element; 1: each state's scale taken once, s_k = w_k / L with L = sum_k w_k l_k, and out = sum_k s_k v_k (LMDeploy TurboMind's split-K reduce: its s_scale): each product w_k l_k rounded, state k's in lane k % 32 (a lane's states summed in their order), then an xor butterfly over the lanes (16, 8, 4, 2, 1), which with at most 32 states is TurboMind's warp sum bit for bit; one IEEE division a state; out = fma(v_k, s_k, o) in state order, rounded once to O; a state whose m is -inf has weight and scale 0 (all of a row's: out 0), as TurboMind special-cases it)
// kt:bind KT_EXPERT_NWAY_ML_ESCALE = 0  (with KT_EXPERT_NWAY_ML: 0: the weight's exponent is m_k - M; 1: (m_k - M) * escale, a float argument (TurboMind keeps the maxima as raw q.k scores and takes exp2f((m_k - M) * exp_scale), exp_scale = softmax_scale * log2(e)), the difference rounded, then the product; the flush (KT_EXPERT_NWAY_FTZ) compares that product)
// kt:bind KT_EXPERT_NWAY_ML_COUNT = 0  (with KT_EXPERT_NWAY_ML: 0: every row merges `sets` states; 1: a count per token: the rows of token t merge the first cnt[t] states (TurboMind's split_cnt, SGLang's num_kv_splits), at most `sets` (then only the states' stride), none where it is <= 0; cnt an integer buffer [tokens] of type C that may be nullptr: then `none` states a row (TurboMind: 1). With any of KT_EXPERT_NWAY_ML_NORM, KT_EXPERT_NWAY_ML_ESCALE and this, the function is merge_attn_states<T, O, C>(out, v, m, l, sets, tokens, heads, head_size, ftz, escale, cnt, none))
// kt:bind KT_EXPERT_NWAY_ML_PARTS = 0  (with KT_EXPERT_NWAY_ML_NORM: 0: out = sum_k s_k v_k, one fma chain in state order; P (a power of two, the binding's ITEMS): P partial sums, state k in sum k % P in its order, the sums added by a halving tree (sum p += sum p + w for w = P / 2, ..., 1): TurboMind's WarpCnt warps each taking splits w, w + WarpCnt, ... and their halving tree in shared memory, bit for bit)
// kt:bind KT_EXPERT_NWAY_FOLD = 0  (with KT_EXPERT_NWAY (the states' layout, (m, d) of state k where its lse would be): 0: each state a log-sum-exp; 1: each state UNNORMALIZED values with the max m and the sum d of its scores in two fp32 arrays, FOLDED in state order into one running state whose values are a 16-bit T and whose arithmetic is T's own operators, as PaddleNLP's (now FastDeploy's) append-attention merge_multi_chunks kernels write it: from m = m0, d = d0 (the kernel's starting values: PaddleNLP's -3.0e+30f for bf16, -5e4f for half, and 1) and o = 0, for each state k: m' = max(m, m_k), s1 = e^(m - m'), s2 = e^(m_k - m') (expf / exp2f / exp2f of times log2(e) by KT_EXPERT_LSE_BASE2 and KT_EXPERT_EXP2_LOG2E; __expf is the last), d = d * s1 + d_k * s2 (fp32, as written: nvcc fuses the first product), o = o * T(s1) + v_k * T(s2) (T's operators as written, the scales rounded to T first: what ptxas makes of them), m = m'; out = o / T(d), T's division; no state special-cased. Token t's row belongs to the request b = (t + offsets[t]) / seq (offsets nullptr: t / seq; PaddleNLP's padding_offsets and max_seq_len), is left as it is where g1[b] <= 0 or g2[b] <= 0 (nullptr: no such test; PaddleNLP's seq_lens_q and seq_lens_kv) and merges min(sets, ceil(lens[b] / split)) states, none where lens[b] <= 0 (lens nullptr: `sets`; PaddleNLP's seq_lens_kv over chunk_size); lens, g1 and g2 of the integer type L, offsets of P. The function is then merge_attn_states<T, L, P>(out, v, m, d, sets, tokens, heads, head_size, lens, split, g1, g2, offsets, seq, m0, d0), launched as KT_EXPERT_NWAY)
// kt:bind-grid KT_EXPERT_NWAY_ML = ["cdiv(tokens * heads, THREADS / 32)"]
// kt:bind-smem KT_EXPERT_NWAY_ROWS_FROM_LAUNCH = ["tokens * heads - (cdiv(tokens * heads, THREADS / 32) - 1) * (THREADS / 32)"]
// kt:bind-grid KT_EXPERT_NWAY_GRID = ["tokens", "heads"]
// kt:bind-block KT_EXPERT_NWAY_GRID = ["32"]
// kt:bind-grid KT_EXPERT_INPLACE = ["tokens", "cdiv(heads, THREADS / 32 * ITEMS)"]
// kt:bind-grid KT_EXPERT_NWAY = ["tokens", "cdiv(heads, THREADS / 32)"]
// kt:bind-grid KT_EXPERT_TOKENS_FROM_GRID = ["tokens * cdiv(heads * head_size, THREADS * VEC * ITEMS)"]
#ifndef KT_THREADS
#define KT_THREADS 128
#endif
#ifndef KT_VEC
#define KT_VEC 8
#endif
#ifndef KT_ITEMS
#define KT_ITEMS 1
#endif
#ifndef KT_EXPERT_LSE_TOKEN_MAJOR
#define KT_EXPERT_LSE_TOKEN_MAJOR 0  // 0: lse[head * tokens + token] (vLLM/SGLang), 1: lse[token * heads + head]
#endif

namespace kt {

#if KT_EXPERT_NWAY_FOLD  // kt:bind
// N-way FOLD of UNNORMALIZED partial values with their (max, sum) states in two fp32 arrays, the values' arithmetic
// in their own 16-bit type (PaddleNLP's and FastDeploy's append-attention merge_multi_chunks): one warp owns each
// (token, head) row, a block THREADS / 32 heads of one token (the grid [tokens, head groups]). The row's request b
// is (token + offsets[token]) / seq; the row is left as it is where a guard of b is <= 0, and merges the first
// min(sets, ceil(lens[b] / split)) of its states. Each lane owns VEC consecutive elements at a time and folds the
// states in their order into a running state, each step as the kernel writes it: m' = max(m, m_k), s1 = e^(m - m'),
// s2 = e^(m_k - m'), d = d * s1 + d_k * s2 in fp32, o = o * T(s1) + v_k * T(s2) in T's operators; ITEMS states
// loaded before any is combined (the fold's order unchanged); out = o / T(d) in T's division.
template <int VEC, int IT, typename T, typename L, typename P>
__device__ __forceinline__ void merge_fold_row(T* __restrict__ out, const T* __restrict__ v,
                                               const float* __restrict__ vm, const float* __restrict__ vd, int sets,
                                               int tokens, int heads, int head_size, const L* __restrict__ lens,
                                               long long split, const L* __restrict__ g1, const L* __restrict__ g2,
                                               const P* __restrict__ offsets, long long seq, float m0, float d0) {
  const int token = blockIdx.x;
  const int head = (int)blockIdx.y * (KT_THREADS / 32) + (int)(threadIdx.x >> 5);
  if (head >= heads) return;  // the warp's row (the same for all its lanes)
  const int lane = threadIdx.x & 31;
  // state k of the row: its (m, d) at s0 + k * sstep, its values head_size times that (`sets` the stride)
#if KT_EXPERT_NWAY == 1  // kt:bind
  const long long s0 = ((long long)token * sets) * heads + head, sstep = heads;
#elif KT_EXPERT_NWAY == 2  // kt:bind
  const long long s0 = (long long)token * heads + head, sstep = (long long)tokens * heads;
#else  // kt:bind
  const long long s0 = ((long long)token * heads + head) * sets, sstep = 1;
#endif  // kt:bind
  const long long row = (long long)token * heads + head;
  // the token's request: the row left as it is where a guard of it is <= 0; its states ceil(lens[b] / split), at
  // most the `sets` allocated
  const long long b = ((long long)token + (offsets != nullptr ? (long long)offsets[token] : 0LL)) / seq;
  if ((g1 != nullptr && g1[b] <= 0) || (g2 != nullptr && g2[b] <= 0)) return;
  int n = sets;
  if (lens != nullptr) {
    const long long len = (long long)lens[b];
    n = len <= 0 ? 0 : (int)min((long long)sets, (len + split - 1) / split);
  }
  for (int c = lane * VEC; c < head_size; c += 32 * VEC) {
    Vec<T, VEC> o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = from_f<T>(0.f);
    float m = m0, d = d0;
    for (int k0 = 0; k0 < n; k0 += IT) {
      float mk[IT], dk[IT];
      Vec<T, VEC> x[IT];  // as stored: the fold's arithmetic is T's
#pragma unroll
      for (int it = 0; it < IT; ++it) {
        if (k0 + it < n) {
          const long long st = s0 + (long long)(k0 + it) * sstep;
          mk[it] = vm[st];
          dk[it] = vd[st];
          x[it] = *reinterpret_cast<const Vec<T, VEC>*>(v + st * head_size + c);
        }
      }
#pragma unroll
      for (int it = 0; it < IT; ++it) {
        if (k0 + it < n) {
          const float mp = m;
          m = fmaxf(mp, mk[it]);
#if KT_EXPERT_LSE_BASE2  // kt:bind
          const float s1 = exp2f(mp - m), s2 = exp2f(mk[it] - m);
#elif KT_EXPERT_EXP2_LOG2E  // kt:bind
          const float s1 = exp2f((mp - m) * 1.4426950408889634f), s2 = exp2f((mk[it] - m) * 1.4426950408889634f);
#else  // kt:bind
          const float s1 = expf(mp - m), s2 = expf(mk[it] - m);
#endif  // kt:bind
          const T s1t = from_f<T>(s1), s2t = from_f<T>(s2);  // the scales rounded to T first
          // as the kernel writes them: fp32 (nvcc fuses the first product), then T's own operators (on sm_90
          // ptxas fuses the first product of the two: o * s1 in one rounding, v * s2 rounded before the add)
          d = d * s1 + dk[it] * s2;
#pragma unroll
          for (int j = 0; j < VEC; ++j) o.v[j] = o.v[j] * s1t + x[it].v[j] * s2t;
        }
      }
    }
    const T dt = from_f<T>(d);
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = o.v[j] / dt;  // T's division (bf16: __hdiv)
    *reinterpret_cast<Vec<T, VEC>*>(out + row * head_size + c) = o;
  }
}

template <typename T, typename L, typename P>
__device__ __forceinline__ void merge_attn_states(T* out, const T* v, const float* vm, const float* vd, int sets,
                                                  int tokens, int heads, int head_size, const L* lens,
                                                  long long split, const L* g1, const L* g2, const P* offsets,
                                                  long long seq, float m0, float d0) {
  // the widest vector (VEC, then halves of it) that head_size and the pointers allow
  constexpr int V2 = KT_VEC >= 4 ? KT_VEC / 2 : 1, V4 = KT_VEC >= 8 ? KT_VEC / 4 : 1;
  if (vec_ok<T, KT_VEC>(head_size, v, out))
    merge_fold_row<KT_VEC, KT_ITEMS>(out, v, vm, vd, sets, tokens, heads, head_size, lens, split, g1, g2, offsets,
                                     seq, m0, d0);
  else if (KT_VEC >= 4 && vec_ok<T, V2>(head_size, v, out))
    merge_fold_row<V2, KT_ITEMS>(out, v, vm, vd, sets, tokens, heads, head_size, lens, split, g1, g2, offsets, seq,
                                 m0, d0);
  else if (KT_VEC >= 8 && vec_ok<T, V4>(head_size, v, out))
    merge_fold_row<V4, KT_ITEMS>(out, v, vm, vd, sets, tokens, heads, head_size, lens, split, g1, g2, offsets, seq,
                                 m0, d0);
  else
    merge_fold_row<1, KT_ITEMS>(out, v, vm, vd, sets, tokens, heads, head_size, lens, split, g1, g2, offsets, seq,
                                m0, d0);
}
#elif KT_EXPERT_NWAY_ML  // kt:bind
// N-way combine of UNNORMALIZED partial values with their (max, sum) metas (llama.cpp's flash_attn_combine_results;
// split-KV decode combines that keep each split's accumulator unnormalized): one warp owns each (token, head) row,
// the rows on a 1-D grid, THREADS / 32 rows a block. The warp first takes the max M of the row's maxima (each lane a
// strided share, then shuffles: fmaxf gives the same whatever the order). Each lane then owns VEC consecutive
// elements at a time and, for each such chunk, runs over the states in their order: w = e^(m_k - M) (flushed to 0
// below the threshold ftz where the kernel flushes), o = fma(w, v, o), d = fma(w, l_k, d); ITEMS states' metas and
// vectors loaded before any of them is combined (ITEMS loads in flight); out = o / d rounded once to O.
#if KT_EXPERT_NWAY_ML_NORM  // kt:bind
// (Scaled by L once: a first pass over the row's states takes L = sum_k w_k l_k, each lane its states' products in
// their order, then the lanes' sums by an xor butterfly; the chunks then add s_k v_k with s_k = w_k / L.)
// The weight of a state whose max is mk in a row whose max is mx (mk not -inf): e^diff, flushed as the kernel does.
__device__ __forceinline__ float ml_weight(float mk, float mx, float escale, float ftz) {
#if KT_EXPERT_NWAY_ML_ESCALE  // kt:bind
  const float diff = (mk - mx) * escale;  // raw-score maxima: the difference rounded, then scaled
#else  // kt:bind
  const float diff = mk - mx;
#endif  // kt:bind
#if KT_EXPERT_LSE_BASE2  // kt:bind
  float w = exp2f(diff);
#elif KT_EXPERT_EXP2_LOG2E  // kt:bind
  float w = exp2f(diff * 1.4426950408889634f);
#else  // kt:bind
  float w = expf(diff);
#endif  // kt:bind
#if KT_EXPERT_NWAY_FTZ == 1  // kt:bind
  w = diff > ftz ? w : 0.f;  // flushed to +0 where diff <= ftz (a NaN difference too)
#elif KT_EXPERT_NWAY_FTZ == 2  // kt:bind
  w = diff >= ftz ? w : 0.f;  // flushed to +0 where diff < ftz (a NaN difference too)
#elif KT_EXPERT_NWAY_FTZ == 3  // kt:bind
  w = diff <= ftz ? 0.f : w;  // flushed to +0 where diff <= ftz (a NaN difference kept)
#elif KT_EXPERT_NWAY_FTZ == 4  // kt:bind
  w = diff < ftz ? 0.f : w;  // flushed to +0 where diff < ftz (a NaN difference kept)
#endif  // kt:bind
  return w;
}

#endif  // kt:bind
#if KT_EXPERT_NWAY_ML_NORM | KT_EXPERT_NWAY_ML_ESCALE | KT_EXPERT_NWAY_ML_COUNT  // kt:bind
template <int VEC, int IT, typename T, typename O, typename C>
__device__ __forceinline__ void merge_parts_row(O* __restrict__ out, const T* __restrict__ v,
                                                const float* __restrict__ vm, const float* __restrict__ vl, int sets,
                                                int tokens, int heads, int head_size, float ftz, float escale,
                                                const C* __restrict__ cnt, int none) {
#else  // kt:bind
template <int VEC, int IT, typename T, typename O>
__device__ __forceinline__ void merge_parts_row(O* __restrict__ out, const T* __restrict__ v,
                                                const float* __restrict__ vm, const float* __restrict__ vl, int sets,
                                                int tokens, int heads, int head_size, float ftz) {
#endif  // kt:bind
  const long long r = (long long)blockIdx.x * (KT_THREADS / 32) + (long long)(threadIdx.x >> 5);
  if (r >= (long long)tokens * heads) return;  // the warp's row (the same for all its lanes)
  const int lane = threadIdx.x & 31;
  const long long token = r / heads, head = r - token * heads;
  // state k of the row: its meta (m, l) at s0 + k * sstep (times MS floats), its values head_size times that
#if KT_EXPERT_NWAY == 1  // kt:bind
  const long long s0 = (token * sets) * heads + head, sstep = heads;
#elif KT_EXPERT_NWAY == 2  // kt:bind
  const long long s0 = token * heads + head, sstep = (long long)tokens * heads;
#else  // kt:bind
  const long long s0 = (token * heads + head) * sets, sstep = 1;
#endif  // kt:bind
#if KT_EXPERT_NWAY_ML == 1  // kt:bind
  constexpr int MS = 2;  // m and l two floats of one pair
#else  // kt:bind
  constexpr int MS = 1;  // two arrays
#endif  // kt:bind
#if KT_EXPERT_NWAY_ML_COUNT  // kt:bind
  {  // this token's states: its count (nullptr: `none`), at most the `sets` allocated (from here on the bound)
    const long long n = cnt != nullptr ? (long long)cnt[token] : (long long)none;
    sets = n <= 0 ? 0 : (n < (long long)sets ? (int)n : sets);
  }
#endif  // kt:bind
  float mx = -INFINITY;
  for (int k = lane; k < sets; k += 32) mx = fmaxf(mx, vm[(s0 + (long long)k * sstep) * MS]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
#if KT_EXPERT_NWAY_ML_NORM  // kt:bind
  // L = sum_k w_k l_k: each product rounded, a lane's states in their order, then the lanes by an xor butterfly (a
  // lane without a state 0)
  float lsum = 0.f;
  for (int k = lane; k < sets; k += 32) {
    const long long st = s0 + (long long)k * sstep;
    const float mk = vm[st * MS];
    const float p = mk == -INFINITY ? 0.f : __fmul_rn(ml_weight(mk, mx, escale, ftz), vl[st * MS]);
    lsum = k == lane ? p : __fadd_rn(lsum, p);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
#endif  // kt:bind
  for (int c = lane * VEC; c < head_size; c += 32 * VEC) {
    float o[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = 0.f;
    float d = 0.f;
#if KT_EXPERT_NWAY_ML_PARTS  // kt:bind
    static_assert(IT == KT_EXPERT_NWAY_ML_PARTS, "one partial sum a state of a step");
    float op[IT][VEC];  // state k0 + it into partial sum it: k % IT
#pragma unroll
    for (int it = 0; it < IT; ++it)
#pragma unroll
      for (int j = 0; j < VEC; ++j) op[it][j] = 0.f;
#endif  // kt:bind
    for (int k0 = 0; k0 < sets; k0 += IT) {
      float mk[IT], lk[IT];
      Vec<T, VEC> x[IT];  // as stored: converted where they are combined
#pragma unroll
      for (int it = 0; it < IT; ++it) {
        if (k0 + it < sets) {
          const long long st = s0 + (long long)(k0 + it) * sstep;
          mk[it] = vm[st * MS];
#if KT_EXPERT_NWAY_ML_NORM == 0  // kt:bind
          lk[it] = vl[st * MS];
#endif  // kt:bind
          x[it] = *reinterpret_cast<const Vec<T, VEC>*>(v + st * head_size + c);
        }
      }
#pragma unroll
      for (int it = 0; it < IT; ++it) {
        if (k0 + it < sets) {
#if KT_EXPERT_NWAY_ML_NORM  // kt:bind
          // the state's scale w / L (0 for an empty state), its values added fused: `o += v * s`
          const float s = mk[it] == -INFINITY ? 0.f : ml_weight(mk[it], mx, escale, ftz) / lsum;
#if KT_EXPERT_NWAY_ML_PARTS  // kt:bind
#pragma unroll
          for (int j = 0; j < VEC; ++j) op[it][j] = __fmaf_rn(to_f(x[it].v[j]), s, op[it][j]);
#else  // kt:bind
#pragma unroll
          for (int j = 0; j < VEC; ++j) o[j] = __fmaf_rn(to_f(x[it].v[j]), s, o[j]);
#endif  // kt:bind
#else  // kt:bind
#if KT_EXPERT_NWAY_ML_ESCALE  // kt:bind
          const float diff = (mk[it] - mx) * escale;  // raw-score maxima: the difference rounded, then scaled
#else  // kt:bind
          const float diff = mk[it] - mx;
#endif  // kt:bind
#if KT_EXPERT_LSE_BASE2  // kt:bind
          float w = exp2f(diff);
#elif KT_EXPERT_EXP2_LOG2E  // kt:bind
          float w = exp2f(diff * 1.4426950408889634f);
#else  // kt:bind
          float w = expf(diff);
#endif  // kt:bind
#if KT_EXPERT_NWAY_FTZ == 1  // kt:bind
          w = diff > ftz ? w : 0.f;  // flushed to +0 where diff <= ftz (a NaN difference too)
#elif KT_EXPERT_NWAY_FTZ == 2  // kt:bind
          w = diff >= ftz ? w : 0.f;  // flushed to +0 where diff < ftz (a NaN difference too)
#elif KT_EXPERT_NWAY_FTZ == 3  // kt:bind
          w = diff <= ftz ? 0.f : w;  // flushed to +0 where diff <= ftz (a NaN difference kept)
#elif KT_EXPERT_NWAY_FTZ == 4  // kt:bind
          w = diff < ftz ? 0.f : w;  // flushed to +0 where diff < ftz (a NaN difference kept)
#endif  // kt:bind
          // both sums fused in state order: what nvcc makes of `d += w * l`, `o += w * v`
          d = __fmaf_rn(w, lk[it], d);
#pragma unroll
          for (int j = 0; j < VEC; ++j) o[j] = __fmaf_rn(w, to_f(x[it].v[j]), o[j]);
#endif  // kt:bind
        }
      }
    }
    Vec<O, VEC> y;
#if KT_EXPERT_NWAY_ML_PARTS  // kt:bind
    // the partial sums added by a halving tree: p += p + w for w = IT / 2, ..., 1
#pragma unroll
    for (int w = IT / 2; w > 0; w /= 2)
#pragma unroll
      for (int p = 0; p < w; ++p)
#pragma unroll
        for (int j = 0; j < VEC; ++j) op[p][j] += op[p + w][j];
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = op[0][j];
#endif  // kt:bind
#if KT_EXPERT_NWAY_ML_NORM  // kt:bind
#pragma unroll
    for (int j = 0; j < VEC; ++j) y.v[j] = from_f<O>(o[j]);
#else  // kt:bind
#pragma unroll
    for (int j = 0; j < VEC; ++j) y.v[j] = from_f<O>(o[j] / d);
#endif  // kt:bind
    *reinterpret_cast<Vec<O, VEC>*>(out + r * head_size + c) = y;
  }
}

#if KT_EXPERT_NWAY_ML_NORM | KT_EXPERT_NWAY_ML_ESCALE | KT_EXPERT_NWAY_ML_COUNT  // kt:bind
template <typename T, typename O, typename C>
__device__ __forceinline__ void merge_attn_states(O* out, const T* v, const float* vm, const float* vl, int sets,
                                                  int tokens, int heads, int head_size, float ftz, float escale,
                                                  const C* cnt, int none) {
#else  // kt:bind
template <typename T, typename O>
__device__ __forceinline__ void merge_attn_states(O* out, const T* v, const float* vm, const float* vl, int sets,
                                                  int tokens, int heads, int head_size, float ftz) {
#endif  // kt:bind
#if KT_EXPERT_NWAY_ROWS_FROM_LAUNCH  // kt:bind
  {  // launched with cdiv(rows, THREADS / 32) blocks, the last block's rows its dynamic shared memory size
    unsigned last;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(last));
    tokens = (int)(((long long)(gridDim.x - 1) * (KT_THREADS / 32) + last) / heads);
  }
#endif  // kt:bind
  // the widest vector (VEC, then halves of it) that head_size and the pointers allow
  constexpr int V2 = KT_VEC >= 4 ? KT_VEC / 2 : 1, V4 = KT_VEC >= 8 ? KT_VEC / 4 : 1;
#if KT_EXPERT_NWAY_ML_NORM | KT_EXPERT_NWAY_ML_ESCALE | KT_EXPERT_NWAY_ML_COUNT  // kt:bind
  if (vec_ok<T, KT_VEC>(head_size, v) && vec_ok<O, KT_VEC>(head_size, out))
    merge_parts_row<KT_VEC, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, ftz, escale, cnt, none);
  else if (KT_VEC >= 4 && vec_ok<T, V2>(head_size, v) && vec_ok<O, V2>(head_size, out))
    merge_parts_row<V2, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, ftz, escale, cnt, none);
  else if (KT_VEC >= 8 && vec_ok<T, V4>(head_size, v) && vec_ok<O, V4>(head_size, out))
    merge_parts_row<V4, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, ftz, escale, cnt, none);
  else
    merge_parts_row<1, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, ftz, escale, cnt, none);
#else  // kt:bind
  if (vec_ok<T, KT_VEC>(head_size, v) && vec_ok<O, KT_VEC>(head_size, out))
    merge_parts_row<KT_VEC, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, ftz);
  else if (KT_VEC >= 4 && vec_ok<T, V2>(head_size, v) && vec_ok<O, V2>(head_size, out))
    merge_parts_row<V2, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, ftz);
  else if (KT_VEC >= 8 && vec_ok<T, V4>(head_size, v) && vec_ok<O, V4>(head_size, out))
    merge_parts_row<V4, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, ftz);
  else
    merge_parts_row<1, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, ftz);
#endif  // kt:bind
}
#elif KT_EXPERT_NWAY_SUMS  // kt:bind
// N-way combine of NORMALIZED partial values (each divided by its own sum of exponentials) with the max m and that
// sum l of each state kept apart (vLLM's paged-attention v2 reduce over max_logits and exp_sums): one warp owns each
// (token, head) row, a block THREADS / 32 heads of one token (or one warp a block on a [tokens, heads] grid). The
// row's states: `sets`, or where the kernel counts them from its sequence's length ceil(lens[token] / split) of
// them (at most `sets`). The warp takes the max M of the maxima (fmaxf: the same in any order), then W = sum_k w_k
// with w_k = l_k * e^(m_k - M), and inv = 1 / (W + eps) once; each lane then owns VEC consecutive elements at a time
// and runs over the states in their order: o += v * w_k * inv, ITEMS states loaded before any is combined, rounded
// once to O.
template <int VEC, int IT, typename T, typename O, typename L>
__device__ __forceinline__ void merge_sums_row(O* __restrict__ out, const T* __restrict__ v,
                                               const float* __restrict__ vm, const float* __restrict__ vl, int sets,
                                               int tokens, int heads, int head_size, const L* __restrict__ lens,
                                               long long split, float eps) {
  const int token = blockIdx.x;
#if KT_EXPERT_NWAY_GRID  // kt:bind
  const int head = (int)blockIdx.y;  // one warp a block, the grid [tokens, heads]
#else  // kt:bind
  const int head = (int)blockIdx.y * (KT_THREADS / 32) + (int)(threadIdx.x >> 5);
#endif  // kt:bind
  if (head >= heads) return;  // the warp's row (the same for all its lanes)
  const int lane = threadIdx.x & 31;
  // state k of the row: its (m, l) at s0 + k * sstep, its values head_size times that
#if KT_EXPERT_NWAY == 1  // kt:bind
  const long long s0 = ((long long)token * sets) * heads + head, sstep = heads;
#elif KT_EXPERT_NWAY == 2  // kt:bind
  const long long s0 = (long long)token * heads + head, sstep = (long long)tokens * heads;
#else  // kt:bind
  const long long s0 = ((long long)token * heads + head) * sets, sstep = 1;
#endif  // kt:bind
  const long long row = (long long)token * heads + head;
  if (lens != nullptr) {  // this sequence's states: ceil(lens[token] / split) of them, at most the `sets` allocated
    const long long len = (long long)lens[token];
    sets = len <= 0 ? 0 : (int)min((long long)sets, (len + split - 1) / split);
  }
  float mx = -INFINITY;
  for (int k = lane; k < sets; k += 32) mx = fmaxf(mx, vm[s0 + (long long)k * sstep]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float total = 0.f;
  for (int k = lane; k < sets; k += 32) {
    const long long st = s0 + (long long)k * sstep;
#if KT_EXPERT_LSE_BASE2  // kt:bind
    total += vl[st] * exp2f(vm[st] - mx);
#elif KT_EXPERT_EXP2_LOG2E  // kt:bind
    total += vl[st] * exp2f((vm[st] - mx) * 1.4426950408889634f);
#else  // kt:bind
    total += vl[st] * expf(vm[st] - mx);
#endif  // kt:bind
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
#if KT_EXPERT_NWAY_SUMS == 2  // kt:bind
  const float inv = __fdividef(1.0f, total + eps);
#else  // kt:bind
  const float inv = 1.0f / (total + eps);
#endif  // kt:bind
  for (int c = lane * VEC; c < head_size; c += 32 * VEC) {
    float o[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = 0.f;
    for (int k0 = 0; k0 < sets; k0 += IT) {
      float w[IT];
      Vec<T, VEC> x[IT];  // as stored: converted where they are combined
#pragma unroll
      for (int it = 0; it < IT; ++it) {
        if (k0 + it < sets) {
          const long long st = s0 + (long long)(k0 + it) * sstep;
#if KT_EXPERT_LSE_BASE2  // kt:bind
          w[it] = vl[st] * exp2f(vm[st] - mx);
#elif KT_EXPERT_EXP2_LOG2E  // kt:bind
          w[it] = vl[st] * exp2f((vm[st] - mx) * 1.4426950408889634f);
#else  // kt:bind
          w[it] = vl[st] * expf(vm[st] - mx);
#endif  // kt:bind
          x[it] = *reinterpret_cast<const Vec<T, VEC>*>(v + st * head_size + c);
        }
      }
#pragma unroll
      for (int it = 0; it < IT; ++it) {
        if (k0 + it < sets) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) o[j] += to_f(x[it].v[j]) * w[it] * inv;
        }
      }
    }
    Vec<O, VEC> y;
#pragma unroll
    for (int j = 0; j < VEC; ++j) y.v[j] = from_f<O>(o[j]);
    *reinterpret_cast<Vec<O, VEC>*>(out + row * head_size + c) = y;
  }
}

template <typename T, typename O, typename L>
__device__ __forceinline__ void merge_attn_states(O* out, const T* v, const float* vm, const float* vl, int sets,
                                                  int tokens, int heads, int head_size, const L* lens,
                                                  long long split, float eps) {
  // the widest vector (VEC, then halves of it) that head_size and the pointers allow
  constexpr int V2 = KT_VEC >= 4 ? KT_VEC / 2 : 1, V4 = KT_VEC >= 8 ? KT_VEC / 4 : 1;
  if (vec_ok<T, KT_VEC>(head_size, v) && vec_ok<O, KT_VEC>(head_size, out))
    merge_sums_row<KT_VEC, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, lens, split, eps);
  else if (KT_VEC >= 4 && vec_ok<T, V2>(head_size, v) && vec_ok<O, V2>(head_size, out))
    merge_sums_row<V2, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, lens, split, eps);
  else if (KT_VEC >= 8 && vec_ok<T, V4>(head_size, v) && vec_ok<O, V4>(head_size, out))
    merge_sums_row<V4, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, lens, split, eps);
  else
    merge_sums_row<1, KT_ITEMS>(out, v, vm, vl, sets, tokens, heads, head_size, lens, split, eps);
}
#elif KT_EXPERT_NWAY  // kt:bind
// N-way (FlashInfer's MergeStates: the states of `sets` KV chunks of one (token, head) row merged into one): one
// warp owns each row, a block THREADS / 32 heads of one token (the grid [tokens, head groups]). Each lane owns VEC
// consecutive elements at a time, and for each such chunk runs the online merge over the states in their order
// (every lane reads each state's lse: one broadcast load), ITEMS states' lse and vectors loaded before any of them
// is combined (ITEMS loads in flight). A state whose lse is -inf is not combined. (m, d) depend on the lse values
// only, so lane 0's from its last chunk are the row's: it writes the merged lse.
#if KT_EXPERT_NWAY_COUNT  // kt:bind
template <int VEC, int IT, typename T, typename O, typename L>
__device__ __forceinline__ void merge_states_row(O* __restrict__ out, float* __restrict__ out_lse,
                                                 const T* __restrict__ v, const float* __restrict__ v_lse, int sets,
                                                 int tokens, int heads, int head_size, const L* __restrict__ lens,
                                                 long long split) {
#elif KT_EXPERT_NWAY_SEQ  // kt:bind
template <int VEC, int IT, typename T, typename O>
__device__ __forceinline__ void merge_states_row(O* __restrict__ out, float* __restrict__ out_lse,
                                                 const T* __restrict__ v, const float* __restrict__ v_lse, int sets,
                                                 int tokens, int heads, int head_size, int seq) {
#else  // kt:bind
template <int VEC, int IT, typename T, typename O>
__device__ __forceinline__ void merge_states_row(O* __restrict__ out, float* __restrict__ out_lse,
                                                 const T* __restrict__ v, const float* __restrict__ v_lse, int sets,
                                                 int tokens, int heads, int head_size) {
#endif  // kt:bind
  const int token = blockIdx.x;
#if KT_EXPERT_NWAY_GRID  // kt:bind
  const int head = (int)blockIdx.y;  // one warp a block, the grid [tokens, heads]
#else  // kt:bind
  const int head = (int)blockIdx.y * (KT_THREADS / 32) + (int)(threadIdx.x >> 5);
#endif  // kt:bind
  if (head >= heads) return;  // the warp's row (the same for all its lanes)
  const int lane = threadIdx.x & 31;
  // state k of the row: its lse at s0 + k * sstep, its values head_size times that
#if KT_EXPERT_NWAY == 1  // kt:bind
  const long long s0 = ((long long)token * sets) * heads + head, sstep = heads;
#elif KT_EXPERT_NWAY == 2  // kt:bind
  const long long s0 = (long long)token * heads + head, sstep = (long long)tokens * heads;
#else  // kt:bind
  const long long s0 = ((long long)token * heads + head) * sets, sstep = 1;
#endif  // kt:bind
  const long long row = (long long)token * heads + head;
#if KT_EXPERT_NWAY_SEQ  // kt:bind
  // the lse of this row in a state: [batch, heads, seq], token = batch * seq + position (the values' rows as above)
  const long long l0 = ((long long)(token / seq) * heads + head) * seq + token % seq;
#endif  // kt:bind
#if KT_EXPERT_NWAY_COUNT  // kt:bind
  // this sequence's states: ceil(lens[token] / split) of them, at most the `sets` allocated (the stride above)
  const long long len = (long long)lens[token];
  sets = len <= 0 ? 0 : (int)min((long long)sets, (len + split - 1) / split);
#endif  // kt:bind
  float m = -INFINITY, d = 0.f;
  for (int c = lane * VEC; c < head_size; c += 32 * VEC) {
    float o[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = 0.f;
    m = -INFINITY;
    d = 0.f;
    for (int k0 = 0; k0 < sets; k0 += IT) {
      float sk[IT];
      Vec<T, VEC> x[IT];  // as stored: converted where they are combined
#pragma unroll
      for (int it = 0; it < IT; ++it) {
        sk[it] = -INFINITY;
        if (k0 + it < sets) {  // the values loaded with the lse, not after it (an empty state's are left unused)
          const long long st = s0 + (long long)(k0 + it) * sstep;
#if KT_EXPERT_NWAY_SEQ  // kt:bind
          sk[it] = v_lse[l0 + (long long)(k0 + it) * sstep];
#else  // kt:bind
          sk[it] = v_lse[st];
#endif  // kt:bind
          x[it] = *reinterpret_cast<const Vec<T, VEC>*>(v + st * head_size + c);
        }
      }
#pragma unroll
      for (int it = 0; it < IT; ++it) {
        if (sk[it] == -INFINITY) continue;  // an empty state contributes nothing
        const float m_new = fmaxf(m, sk[it]);
#if KT_EXPERT_LSE_BASE2  // kt:bind
        const float a = exp2f(m - m_new), b = exp2f(sk[it] - m_new);
#else  // kt:bind
        const float a = expf(m - m_new), b = expf(sk[it] - m_new);
#endif  // kt:bind
        // the running products fused, the new state's rounded: what nvcc makes of `d * a + b`, `o * a + v * b`
        d = __fmaf_rn(d, a, b);
#pragma unroll
        for (int j = 0; j < VEC; ++j) o[j] = __fmaf_rn(o[j], a, to_f(x[it].v[j]) * b);
        m = m_new;
      }
    }
    const float inv = d > 0.f ? 1.f / d : 0.f;
    Vec<O, VEC> y;
#pragma unroll
    for (int j = 0; j < VEC; ++j) y.v[j] = from_f<O>(o[j] * inv);
    *reinterpret_cast<Vec<O, VEC>*>(out + row * head_size + c) = y;
  }
  if (out_lse != nullptr && lane == 0) {
#if KT_EXPERT_NWAY_SEQ  // kt:bind
    const long long li = l0;
#else  // kt:bind
#if KT_EXPERT_LSE_TOKEN_MAJOR
    const long long li = row;
#else
    const long long li = (long long)head * tokens + token;
#endif
#endif  // kt:bind
#if KT_EXPERT_LSE_BASE2  // kt:bind
    out_lse[li] = d > 0.f ? m + log2f(d) : -INFINITY;
#else  // kt:bind
    out_lse[li] = d > 0.f ? m + logf(d) : -INFINITY;
#endif  // kt:bind
  }
}

#if KT_EXPERT_NWAY_COUNT  // kt:bind
template <typename T, typename O, typename L>
__device__ __forceinline__ void merge_attn_states(O* out, float* out_lse, const T* v, const float* v_lse, int sets,
                                                  int tokens, int heads, int head_size, const L* lens,
                                                  long long split) {
  // the widest vector (VEC, then halves of it) that head_size and the pointers allow
  constexpr int V2 = KT_VEC >= 4 ? KT_VEC / 2 : 1, V4 = KT_VEC >= 8 ? KT_VEC / 4 : 1;
  if (vec_ok<T, KT_VEC>(head_size, v) && vec_ok<O, KT_VEC>(head_size, out))
    merge_states_row<KT_VEC, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size, lens, split);
  else if (KT_VEC >= 4 && vec_ok<T, V2>(head_size, v) && vec_ok<O, V2>(head_size, out))
    merge_states_row<V2, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size, lens, split);
  else if (KT_VEC >= 8 && vec_ok<T, V4>(head_size, v) && vec_ok<O, V4>(head_size, out))
    merge_states_row<V4, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size, lens, split);
  else
    merge_states_row<1, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size, lens, split);
}
#elif KT_EXPERT_NWAY_SEQ  // kt:bind
template <typename T, typename O>
__device__ __forceinline__ void merge_attn_states(O* out, float* out_lse, const T* v, const float* v_lse, int sets,
                                                  int tokens, int heads, int head_size, int seq) {
  // the widest vector (VEC, then halves of it) that head_size and the pointers allow
  constexpr int V2 = KT_VEC >= 4 ? KT_VEC / 2 : 1, V4 = KT_VEC >= 8 ? KT_VEC / 4 : 1;
  if (vec_ok<T, KT_VEC>(head_size, v) && vec_ok<O, KT_VEC>(head_size, out))
    merge_states_row<KT_VEC, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size, seq);
  else if (KT_VEC >= 4 && vec_ok<T, V2>(head_size, v) && vec_ok<O, V2>(head_size, out))
    merge_states_row<V2, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size, seq);
  else if (KT_VEC >= 8 && vec_ok<T, V4>(head_size, v) && vec_ok<O, V4>(head_size, out))
    merge_states_row<V4, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size, seq);
  else
    merge_states_row<1, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size, seq);
}
#else  // kt:bind
template <typename T, typename O>
__device__ __forceinline__ void merge_attn_states(O* out, float* out_lse, const T* v, const float* v_lse, int sets,
                                                  int tokens, int heads, int head_size) {
  // the widest vector (VEC, then halves of it) that head_size and the pointers allow
  constexpr int V2 = KT_VEC >= 4 ? KT_VEC / 2 : 1, V4 = KT_VEC >= 8 ? KT_VEC / 4 : 1;
  if (vec_ok<T, KT_VEC>(head_size, v) && vec_ok<O, KT_VEC>(head_size, out))
    merge_states_row<KT_VEC, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size);
  else if (KT_VEC >= 4 && vec_ok<T, V2>(head_size, v) && vec_ok<O, V2>(head_size, out))
    merge_states_row<V2, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size);
  else if (KT_VEC >= 8 && vec_ok<T, V4>(head_size, v) && vec_ok<O, V4>(head_size, out))
    merge_states_row<V4, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size);
  else
    merge_states_row<1, KT_ITEMS>(out, out_lse, v, v_lse, sets, tokens, heads, head_size);
}
#endif  // kt:bind
#elif KT_EXPERT_INPLACE  // kt:bind
// In place (FlashInfer's merge_state_in_place, the running state of a cascade or chunked prefill): the first state
// (v, v_lse) becomes its merge with the other (o, o_lse) where mask (one entry a token; nullptr: every token) is
// nonzero; a token whose entry is 0 keeps its values and its lse. One warp owns each (token, head) row: every lane
// reads the row's two lse values, lane 0 writes the merged lse only after __syncwarp (every lane has read the old
// one), and each element of the row is read and written by one lane; no other warp or block touches the row. The
// grid is [tokens, head groups]: a block merges THREADS / 32 * ITEMS heads of one token, each warp ITEMS
// consecutive heads, all of their vectors loaded before any is combined (ITEMS rows of loads in flight).
template <int VEC, int IT, typename T, typename M>
__device__ __forceinline__ void merge_rows_in_place(T* __restrict__ v, float* __restrict__ v_lse,
                                                    const T* __restrict__ o, const float* __restrict__ o_lse,
                                                    int tokens, int heads, int head_size,
                                                    const M* __restrict__ mask) {
  const int token = blockIdx.x;
  if (mask != nullptr && !mask[token]) return;  // the block's token is not merged: left as it is
  const int h0 = ((int)blockIdx.y * (KT_THREADS / 32) + (int)(threadIdx.x >> 5)) * IT;
  if (h0 >= heads) return;  // the warp's rows (the same for all its lanes)
  const int lane = threadIdx.x & 31;
  // the warp's rows are consecutive heads of one token: row it starts it * head_size after the first, its lse is
  // it (token-major) or it * tokens (head-major) after the first's
#if KT_EXPERT_LSE_TOKEN_MAJOR
  const long long l0 = (long long)token * heads + h0, lstep = 1;
#else
  const long long l0 = (long long)h0 * tokens + token, lstep = tokens;
#endif
  T* __restrict__ vr = v + ((long long)token * heads + h0) * head_size;
  const T* __restrict__ orow = o + ((long long)token * heads + h0) * head_size;
  float ps[IT], os[IT], lse[IT];
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    if (h0 + it < heads) {
      const float pl = v_lse[l0 + it * lstep], ol = o_lse[l0 + it * lstep];
      const float m = fmaxf(pl, ol);
#if KT_EXPERT_LSE_BASE2  // kt:bind
      const float pe = exp2f(pl - m), oe = exp2f(ol - m);
#else  // kt:bind
      const float pe = expf(pl - m), oe = expf(ol - m);
#endif  // kt:bind
      const float sum = pe + oe;
      ps[it] = pe / sum;
      os[it] = oe / sum;
#if KT_EXPERT_LSE_BASE2  // kt:bind
      lse[it] = log2f(sum) + m;
#else  // kt:bind
      lse[it] = logf(sum) + m;
#endif  // kt:bind
    }
  }
  __syncwarp();  // every lane has read its rows' old lse before lane 0 replaces them
  if (lane == 0) {
#pragma unroll
    for (int it = 0; it < IT; ++it)
      if (h0 + it < heads) v_lse[l0 + it * lstep] = lse[it];
  }
  for (int c = lane * VEC; c < head_size; c += 32 * VEC) {
    Vec<T, VEC> a[IT], b[IT];  // as stored: converted where they are combined (half the registers of floats)
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      if (h0 + it < heads) {
        a[it] = *reinterpret_cast<const Vec<T, VEC>*>(vr + (long long)it * head_size + c);
        b[it] = *reinterpret_cast<const Vec<T, VEC>*>(orow + (long long)it * head_size + c);
      }
    }
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      if (h0 + it < heads) {
        // the first state's product fused, the other's rounded: what nvcc makes of a kernel's `ps * a + os * b`
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          a[it].v[j] = from_f<T>(__fmaf_rn(to_f(a[it].v[j]), ps[it], to_f(b[it].v[j]) * os[it]));
        *reinterpret_cast<Vec<T, VEC>*>(vr + (long long)it * head_size + c) = a[it];
      }
    }
  }
}

template <typename T, typename M>
__device__ __forceinline__ void merge_attn_states(T* v, float* v_lse, const T* o, const float* o_lse, int tokens,
                                                  int heads, int head_size, const M* mask) {
  // the widest vector (VEC, then halves of it) that head_size and the pointers allow
  constexpr int V2 = KT_VEC >= 4 ? KT_VEC / 2 : 1, V4 = KT_VEC >= 8 ? KT_VEC / 4 : 1;
  if (vec_ok<T, KT_VEC>(head_size, v, o))
    merge_rows_in_place<KT_VEC, KT_ITEMS>(v, v_lse, o, o_lse, tokens, heads, head_size, mask);
  else if (KT_VEC >= 4 && vec_ok<T, V2>(head_size, v, o))
    merge_rows_in_place<V2, KT_ITEMS>(v, v_lse, o, o_lse, tokens, heads, head_size, mask);
  else if (KT_VEC >= 8 && vec_ok<T, V4>(head_size, v, o))
    merge_rows_in_place<V4, KT_ITEMS>(v, v_lse, o, o_lse, tokens, heads, head_size, mask);
  else
    merge_rows_in_place<1, KT_ITEMS>(v, v_lse, o, o_lse, tokens, heads, head_size, mask);
}
#else  // kt:bind
// Slot = VEC consecutive elements of one (token, head) row. Each thread merges ITEMS slots, gridDim.x * blockDim.x
// apart (coalesced), loading all of them before combining any (ITEMS independent loads in flight). I: the index
// type, 32-bit whenever the element count allows it (cheaper divisions).
#if KT_EXPERT_OUT_TYPE  // kt:bind
template <int VEC, int IT, typename I, typename T, typename O>
__device__ __forceinline__ void merge_slots(O* __restrict__ out, float* __restrict__ out_lse, const T* __restrict__ p,
#else  // kt:bind
template <int VEC, int IT, typename I, typename T>
__device__ __forceinline__ void merge_slots(T* __restrict__ out, float* __restrict__ out_lse, const T* __restrict__ p,
#endif  // kt:bind
                                            const float* __restrict__ p_lse, const T* __restrict__ s,
#if KT_EXPERT_STATE  // kt:bind
                                            const float* __restrict__ s_lse, int tokens, int heads, int head_size,
                                            float* __restrict__ out_l, const float* __restrict__ p_l,
                                            const float* __restrict__ s_l) {
#else  // kt:bind
                                            const float* __restrict__ s_lse, int tokens, int heads, int head_size) {
#endif  // kt:bind
  const I per_head = head_size / VEC;
  const I slots = (I)tokens * heads * per_head;
  const I stride = (I)gridDim.x * blockDim.x;
  for (I base = (I)blockIdx.x * blockDim.x + threadIdx.x; base < slots; base += stride * IT) {
    float a[IT][VEC], b[IT][VEC], pl[IT], sl[IT];
#if KT_EXPERT_STATE  // kt:bind
    float pn[IT], sn[IT];  // the sums of exponentials (pl, sl: the maxima)
#endif  // kt:bind
    I li[IT], e[IT];
    int part[IT];
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const I slot = base + (I)it * stride;
      if (slot < slots) {
        const I th = slot / per_head;  // token * heads + head
        part[it] = (int)(slot - th * per_head);
        const I token = th / heads, head = th - token * heads;
#if KT_EXPERT_LSE_TOKEN_MAJOR
        li[it] = th;
#else
        li[it] = head * tokens + token;
#endif
        e[it] = th * head_size + (I)part[it] * VEC;
#if KT_EXPERT_STATE == 2  // kt:bind
        pl[it] = p_lse[2 * li[it]];
        sl[it] = s_lse[2 * li[it]];
        pn[it] = p_l[2 * li[it]];
        sn[it] = s_l[2 * li[it]];
#else  // kt:bind
        pl[it] = p_lse[li[it]];
        sl[it] = s_lse[li[it]];
#if KT_EXPERT_STATE  // kt:bind
        pn[it] = p_l[li[it]];
        sn[it] = s_l[li[it]];
#endif  // kt:bind
#endif  // kt:bind
        if constexpr (VEC == 1) {
          a[it][0] = to_f(p[e[it]]);
          b[it][0] = to_f(s[e[it]]);
        } else {
          load_vec<T, VEC>(p + e[it], a[it]);
          load_vec<T, VEC>(s + e[it], b[it]);
        }
      }
    }
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      if (base + (I)it * stride < slots) {
#if KT_EXPERT_STATE  // kt:bind
        const float m = fmaxf(pl[it], sl[it]);
        const float ms = m == -INFINITY ? 0.f : m;  // both states empty: weights 0, not NaN
#if KT_EXPERT_LSE_BASE2  // kt:bind
        const float pe = pn[it] * exp2f(pl[it] - ms), se = sn[it] * exp2f(sl[it] - ms);
#elif KT_EXPERT_EXP2_LOG2E  // kt:bind
        const float pe = pn[it] * exp2f((pl[it] - ms) * 1.4426950408889634f);
        const float se = sn[it] * exp2f((sl[it] - ms) * 1.4426950408889634f);
#else  // kt:bind
        const float pe = pn[it] * expf(pl[it] - ms), se = sn[it] * expf(sl[it] - ms);
#endif  // kt:bind
        const float sum = pe + se;
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        const float ps = pe * inv, ss = se * inv;
#else  // kt:bind
        const float pv = isinf(pl[it]) ? -INFINITY : pl[it], sv = isinf(sl[it]) ? -INFINITY : sl[it];
        const float m = fmaxf(pv, sv);
#if KT_EXPERT_LSE_BASE2  // kt:bind
        const float pe = exp2f(pv - m), se = exp2f(sv - m);
#else  // kt:bind
        const float pe = expf(pv - m), se = expf(sv - m);
#endif  // kt:bind
        const float sum = pe + se;
        const float ps = pe / sum, ss = se / sum;
#endif  // kt:bind
#if KT_EXPERT_STATE  // kt:bind
        // p's product fused, s's rounded: what nvcc makes of a kernel's own `a * ps + b * ss`
#pragma unroll
        for (int j = 0; j < VEC; ++j) a[it][j] = __fmaf_rn(a[it][j], ps, b[it][j] * ss);
#else  // kt:bind
#pragma unroll
        for (int j = 0; j < VEC; ++j) a[it][j] = a[it][j] * ps + b[it][j] * ss;
#endif  // kt:bind
#if KT_EXPERT_OUT_TYPE  // kt:bind
        if constexpr (VEC == 1) out[e[it]] = from_f<O>(a[it][0]);
        else store_vec<O, VEC>(out + e[it], a[it]);
#else  // kt:bind
        if constexpr (VEC == 1) out[e[it]] = from_f<T>(a[it][0]);
        else store_vec<T, VEC>(out + e[it], a[it]);
#endif  // kt:bind
#if KT_EXPERT_STATE  // kt:bind
#if KT_EXPERT_STATE == 2  // kt:bind
        if (part[it] == 0) {
          if (out_lse != nullptr) out_lse[2 * li[it]] = m;
          if (out_l != nullptr) out_l[2 * li[it]] = sum;
        }
#else  // kt:bind
        if (part[it] == 0) {
          if (out_lse != nullptr) out_lse[li[it]] = m;
          if (out_l != nullptr) out_l[li[it]] = sum;
        }
#endif  // kt:bind
#elif KT_EXPERT_LSE_BASE2  // kt:bind
        if (out_lse != nullptr && part[it] == 0) out_lse[li[it]] = log2f(sum) + m;
#else  // kt:bind
        if (out_lse != nullptr && part[it] == 0) out_lse[li[it]] = logf(sum) + m;
#endif  // kt:bind
      }
    }
  }
}

#if KT_EXPERT_OUT_TYPE  // kt:bind
template <int VEC, typename T, typename O>
__device__ __forceinline__ void merge_index(O* out, float* out_lse, const T* p, const float* p_lse, const T* s,
#else  // kt:bind
template <int VEC, typename T>
__device__ __forceinline__ void merge_index(T* out, float* out_lse, const T* p, const float* p_lse, const T* s,
#endif  // kt:bind
#if KT_EXPERT_STATE  // kt:bind
                                            const float* s_lse, int tokens, int heads, int head_size, float* out_l,
                                            const float* p_l, const float* s_l) {
  const long long n = (long long)tokens * heads * head_size;
  if (n + (long long)gridDim.x * blockDim.x * KT_ITEMS * VEC < 0x7fffffffLL)
    merge_slots<VEC, KT_ITEMS, int>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size, out_l, p_l, s_l);
  else
    merge_slots<VEC, KT_ITEMS, long long>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size, out_l, p_l,
                                          s_l);
}
#else  // kt:bind
                                            const float* s_lse, int tokens, int heads, int head_size) {
  const long long n = (long long)tokens * heads * head_size;
  if (n + (long long)gridDim.x * blockDim.x * KT_ITEMS * VEC < 0x7fffffffLL)
    merge_slots<VEC, KT_ITEMS, int>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size);
  else
    merge_slots<VEC, KT_ITEMS, long long>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size);
}
#endif  // kt:bind

#if KT_EXPERT_OUT_TYPE  // kt:bind
template <typename T, typename O>
__device__ __forceinline__ void merge_attn_states(O* out, float* out_lse, const T* p, const float* p_lse, const T* s,
#else  // kt:bind
template <typename T>
__device__ __forceinline__ void merge_attn_states(T* out, float* out_lse, const T* p, const float* p_lse, const T* s,
#endif  // kt:bind
#if KT_EXPERT_STATE  // kt:bind
                                                  const float* s_lse, int tokens, int heads, int head_size,
                                                  float* out_l, const float* p_l, const float* s_l) {
#else  // kt:bind
                                                  const float* s_lse, int tokens, int heads, int head_size) {
#endif  // kt:bind
#if KT_EXPERT_TOKENS_FROM_GRID  // kt:bind
  {  // launched with tokens * per_token blocks (the launch's grid_when): the count comes back exactly
    const int per_token = (heads * head_size + KT_THREADS * KT_VEC * KT_ITEMS - 1) / (KT_THREADS * KT_VEC * KT_ITEMS);
    tokens = (int)(gridDim.x / per_token);
  }
#endif  // kt:bind
  // the widest vector (VEC, then halves of it) that head_size and the pointers allow
#if KT_EXPERT_STATE  // kt:bind
  constexpr int V2 = KT_VEC >= 4 ? KT_VEC / 2 : 1, V4 = KT_VEC >= 8 ? KT_VEC / 4 : 1;
  if (vec_ok<T, KT_VEC>(head_size, out, p, s))
    merge_index<KT_VEC>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size, out_l, p_l, s_l);
  else if (KT_VEC >= 4 && vec_ok<T, V2>(head_size, out, p, s))
    merge_index<V2>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size, out_l, p_l, s_l);
  else if (KT_VEC >= 8 && vec_ok<T, V4>(head_size, out, p, s))
    merge_index<V4>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size, out_l, p_l, s_l);
  else
    merge_index<1>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size, out_l, p_l, s_l);
#else  // kt:bind
  if (vec_ok<T, KT_VEC>(head_size, out, p, s))
    merge_index<KT_VEC>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size);
  else if (KT_VEC >= 4 && vec_ok<T, (KT_VEC >= 4 ? KT_VEC / 2 : 1)>(head_size, out, p, s))
    merge_index<(KT_VEC >= 4 ? KT_VEC / 2 : 1)>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size);
  else if (KT_VEC >= 8 && vec_ok<T, (KT_VEC >= 8 ? KT_VEC / 4 : 1)>(head_size, out, p, s))
    merge_index<(KT_VEC >= 8 ? KT_VEC / 4 : 1)>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size);
  else
    merge_index<1>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size);
#endif  // kt:bind
}
#endif  // kt:bind

}  // namespace kt
