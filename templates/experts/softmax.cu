/* kerntune-expert:
name = "softmax"
family = "softmax"
description = "Row softmax: out = exp(x - max) / sum(exp(x - max)). The row stays in registers (one read, one write), 16-byte loads (the vector and scalar paths compiled apart), warp-shuffle block reductions for max and sum, one reciprocal of the sum per row; expf kept (exact to fp32 tolerance)."
function = "kt::softmax"
roles = ["out: out T[rows * hidden]", "x: in T[rows * hidden]", "rows: i32", "hidden: i32"]
helpers = ["_rows.cuh"]
constraints = ["VEC * ESIZE <= 16", "THREADS * VEC * ITEMS >= hidden", "THREADS * ROWS <= 1024", "THREADS * ROWS >= 32"]

[params.THREADS]
values = [32, 64, 128, 256, 512, 1024]
default = 256
kind = "block_size"
why = "most threads per row: the launch gives each row min(THREADS, ceil(hidden / (VEC * ITEMS)) rounded up to a warp) threads, so one configuration fits short and long rows; the row is reduced over them (warp shuffles, then the warps' partials through shared memory)"

[params.ROWS]
values = [1, 2, 4, 8]
default = 1
kind = "rows_per_block"
why = "rows per block (blockDim.y): more work per block for short rows"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load/store: 16 bytes at most; the kernel falls back to scalar accesses when the row or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4, 8, 16]
default = 8
kind = "items_per_thread"
why = "vectors each thread keeps in registers (the row is spread over just enough threads to give each this many; THREADS * VEC * ITEMS must cover the row); a row that needs fewer uses the fewest that cover it"

[launch]
grid = ["cdiv(rows, ROWS)"]
block = ["min(THREADS, round_up(cdiv(hidden, VEC * ITEMS), 32))", "ROWS"]
bounds = "THREADS * ROWS"
smem = "0"
*/
// kt:bind KT_EXPERT_LOGIT_DIVIDE = 0  (general form: 0: the logits times scale; 1: divided by it (a temperature passed by value), the kernel's own rounding)
// kt:bind KT_EXPERT_GENERAL = 0  (0: softmax(x) stored as the input's type; 1: softmax(x * scale / row_div[row]) stored as a type of its own)
// kt:bind KT_EXPERT_MASK = 0  (general form only. 0: no mask; 1: an additive mask [mask_rows, hidden] added after the scale, broadcast over one dimension of the rows: rows [outer, rows / mask_rows, inner] read mask rows [outer, inner]; inner = mask_rows broadcasts over a leading dimension (heads), inner = 1 shares one mask row among consecutive rows; 2: causal, bottom-right aligned: rows [outer, q_len] of scores over hidden keys, query q = row % q_len sees keys 0 .. q + hidden - q_len, the others neither read nor counted and written as 0; 3: causal, top-left aligned: query q sees keys 0 .. q; 4: a keep-mask of bytes [mask_rows, hidden] broadcast as 1 (PyTorch's masked_fill(mask == 0, -inf)): a key whose byte is 0 is left out, a row with every key left out is written as 0; 5: a byte mask [mask_rows, hidden] broadcast as 1 whose NONZERO bytes mask the key out, its logit (after the scale) replaced by -10000 (Megatron's and Transformer Engine's scaled_masked_softmax: masked_fill(mask, -10000)), a row whose max is -10000 (every key masked) written as 0 (their scale_value); 6: the same without that: a row with every key masked is the softmax of its -10000s, uniform (Megatron's and Apex's original kernel); 7: a keep-mask of the mask's type M [mask_rows, hidden] (broadcast as 1) whose ZERO values leave a key out by replacing its logit with `fill` (the float argument after mask_inner), after a nullable additive bias [bias_rows, hidden] of type M (the three arguments after fill: bias, bias_rows, bias_inner, broadcast as the mask is by its own rows and inner extent) is added (with KT_EXPERT_ROUND_SCALED 2 the sum rounded to T before the fill): AlphaFold's Evoformer attention softmax (FastFold's / OpenFold's / Uni-Fold's fused mask + pair-bias softmax, fill -1e9 or -1e10); a row with every key left out is the softmax of its fills, uniform)
// kt:bind KT_EXPERT_CAUSAL_KEEP = 0  (causal mask (KT_EXPERT_MASK 2 or 3) only. 0: the masked keys written as 0; 1: the masked keys not written, the output keeping what it held there (llm.c's causal attention softmax writes the keys 0 .. query of each row of its (T, T) scores, the upper triangle left as it was); a row that sees no key is then not written at all)
// kt:bind KT_EXPERT_SINK = 0  (general form, not with a causal mask. 0: no sink; 1: a sink logit per head (gpt-oss attention sinks: softmax(cat([logits, sink]))[..., :-1]), sinks[(row / sink_inner) % sink_heads] of type S (fp32 or 16-bit, widened exactly), neither scaled nor divided: it joins the row's max m and adds expf(sink - m) to the denominator, and has no output column; rows [outer, sink_heads, sink_inner]: sink_inner = 1 reads sink row % sink_heads, sink_inner = rows / sink_heads shares one sink among consecutive rows)
// kt:bind KT_EXPERT_ROUND_SCALED = 0  (general form: 0: the scaled logit x * scale (/ row_div) kept in fp32; 1: rounded to the input's type T before a mask is added (Hugging Face's eager attention: `attn_weights * scaling` is a bf16 / fp16 tensor, an fp32 mask then added in fp32); 2: rounded to T, and its sum with a mask of type T rounded to T again (a 16-bit tensor plus a 16-bit mask))
// kt:bind KT_EXPERT_KEYS = 0  (general form, with no mask or an additive one, not with a sink. 0: every key of the row; 1: a key range per batch read from int32 buffers (ONNX Runtime's 1-D mask index: valid keys [mask_start[b], mask_end[b])): rows [batches, rows / batches] on a grid [cdiv(rows / batches, ROWS), min(batches, 65535), cdiv(batches, 65535)], batch b = blockIdx.z * gridDim.y + blockIdx.y (the batch count the argument after q_len: more than the grid's y holds fold into z); row r sees keys [max(0, key_start[b]) (key_start null: 0), min(hidden, key_end[b])), an empty range widened to every key (attend to none = attend to all), then with q_len > 0 a causal limit, bottom-right aligned, on top: query q = r % q_len sees keys below hidden - q_len + q + 1; keys outside neither counted nor read past the range's end, written 0; a row with none written 0; 2: the same with an empty range kept empty)
// kt:bind KT_EXPERT_ALIBI = 0  (general form with an additive mask (KT_EXPERT_MASK 1) only. 0: the mask added as it is; 1: FasterTransformer's / TensorRT-LLM's masked softmax with ALiBi (BLOOM, MPT): rows [batch, heads, q_len] over a mask [batch, q_len] of 0/1 values of type M (1 keep), read as the mask's middle broadcast (mask_inner = q_len); the logit x * scale plus the bias slope * (k - q) + (1 - m) * -10000 (summed in that order; slope = slopes[h] of type M, null: no slope term), query q = row % mask_inner, head h = (row / mask_inner) % (rows / mask_rows); exponentials by __expf, the row's sum + 1e-6 inverted by __fdividef, each probability that inverse times the exponential, rounded once at the store; 2: the same with the accurate expf for the exponentials)
// kt:bind KT_EXPERT_MASK_BIAS = 0  (with an additive mask (KT_EXPERT_MASK 1), not with ALiBi, keys or a sink. 0: one additive tensor; 1: a second additive tensor `bias` of type M [bias_rows, hidden] (after mask_inner: mask_mid, then bias, bias_rows, bias_inner, bias_mid; null: none), added after the mask; each of the two broadcast by its rows, inner extent and middle extent (mid 0: rows / its rows, the one broadcast dimension; else a tensor [outer, inner] over rows [.., outer, mid, inner], its outer index wrapped: a broadcast over a leading and a middle dimension at once) (Swin's window attention: the relative-position bias [heads, N, N] and the shifted-window mask [windows, N, N] both added to the scores))
// kt:bind KT_EXPERT_ALIBI_BIAS = 0  (with KT_EXPERT_ALIBI only. 0: the slope term; 1: an additive bias TENSOR of type M [bias_rows, hidden] in the slopes' place (the pointer; null: no bias), broadcast by its own rows and inner extent (the two int arguments after it, as the mask is by mask_rows and mask_inner), its element added with (1 - m) * -10000 in the slope term's place (ByteTransformer's BERT softmax with a relative-position bias [head, seq, seq] over head-major scores [head, batch, seq, seq]))
// kt:bind-sizes KT_EXPERT_KEYS = ["batches"]
// kt:bind KT_EXPERT_KEYS_INNER = 0  (with KT_EXPERT_KEYS only. 0: the key buffers hold a range per batch; 1: a range per batch and query: the buffers [batches, keys_inner] (the int argument after batches), the rows of a batch [rows / batches / keys_inner, keys_inner] (heads, queries), row r of batch b reading entry b * keys_inner + r % keys_inner (a length per (batch, query) broadcast over the heads: scores [batch, heads, q_len, keys] over lengths [batch, q_len]))
// kt:bind KT_EXPERT_LOG = 0  (general form, with no mask, sink or key range. 0: the probabilities exp(l - m) / s; 1: the log-probabilities l - (m + logf(s)), l the logit, m the row's max, s the sum of expf(l - m): the row's log-sum-exp taken once in fp32 and subtracted from each logit, one store (PyTorch's LogSoftMax, FasterTransformer / TensorRT-LLM's beam-search log-softmax, the log-probs vLLM and SGLang return))
// kt:bind KT_EXPERT_X_STRIDE = 0  (general form, with no mask, sink or key range. 0: the input rows hidden elements apart; 1: x_stride elements apart (the last argument, x_stride >= hidden): the logits of a vocabulary padded past its hidden real columns (TensorRT-LLM's vocab_size_padded), the output rows contiguous; 2: the input AND output rows x_stride elements apart, the first hidden of each softmaxed and the rest neither read nor written (llama2.c's decode attention scores [n_heads, max_seq_len] softmaxed in place over the first pos + 1: yalm, llama2.c CUDA ports))
// kt:bind-grid KT_EXPERT_KEYS = ["cdiv(rows / batches, ROWS)", "min(batches, 65535)", "cdiv(batches, 65535)"]
#ifndef KT_THREADS
#define KT_THREADS 256
#endif
#ifndef KT_ROWS
#define KT_ROWS 1
#endif
#ifndef KT_VEC
#define KT_VEC 8
#endif
#ifndef KT_ITEMS
#define KT_ITEMS 8
#endif

namespace kt {

#if KT_EXPERT_GENERAL == 0  // kt:bind
// P: the row path (scalar, vector, peeled: _rows.cuh), each compiled apart, so none carries another's
// branches and registers (on the H100, 16-bit rows of 4096: 69% -> 93% of copy bandwidth together with the
// reciprocal below, gpu/experiments/expert_rows_probe.py).
template <int IT, int P, typename T>
__device__ __forceinline__ void softmax_impl(T* __restrict__ out, const T* __restrict__ x, int rows, int hidden) {
  const int row = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = row < rows;
  const long long off = (long long)(active ? row : 0) * hidden;
  const int lead = rows_lead<P, KT_VEC>(off);
  float v[IT][KT_VEC];
  rows_load<0, KT_VEC, IT, P>(x + off, hidden, v, lead);
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j)
      if (rows_in(rows_elem<0, KT_VEC, IT, P>(i, j, lead), hidden)) m = fmaxf(m, v[i][j]);
  m = row_reduce<0, KT_ROWS, 0>(m, Max(), -INFINITY);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
      const float e = rows_in(rows_elem<0, KT_VEC, IT, P>(i, j, lead), hidden) ? expf(v[i][j] - m) : 0.f;
      v[i][j] = e;
      s += e;
    }
  const float inv = 1.f / row_reduce<0, KT_ROWS, 1>(s, Sum(), 0.f);  // one division per row, not per element
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] * inv;
  if (active) rows_store<0, KT_VEC, IT, P>(out + off, hidden, v, lead);
}

template <typename T>
__device__ __forceinline__ void softmax(T* out, const T* x, int rows, int hidden) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x, out)), (vec_ok<T, KT_VEC>(0, x, out)),
                  (softmax_impl<IT, P, T>(out, x, rows, hidden)));
}
#else  // kt:bind
#if (KT_EXPERT_MASK - 2) * (KT_EXPERT_MASK - 3) == 0  // kt:bind
// The general form with a causal mask: softmax(x * scale / row_div[row]) over the keys the row's query sees, rows
// [outer, q_len] of hidden keys, query q = row % q_len. Bottom-right aligned (2): q sees keys 0 .. q + hidden -
// q_len (prefill q_len == hidden, or decode and chunked prefill q_len < hidden); top-left (3): keys 0 .. q. The
// masked keys are not read (a causal prefill reads half the scores) and are written as 0; a row that sees no key
// is written as 0.
template <int IT, int P, typename T, typename O>
__device__ __forceinline__ void softmax_impl(O* __restrict__ out, const T* __restrict__ x, int rows, int hidden,
                                             float scale, const float* __restrict__ row_div, int q_len) {
  const int row = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = row < rows;
  const long long off = (long long)(active ? row : 0) * hidden;
  const int lead = rows_lead<P, KT_VEC>(off);
  const int q = (active ? row : 0) % q_len;
#if KT_EXPERT_MASK == 2  // kt:bind
  const int seen = min(hidden, max(0, q + 1 + hidden - q_len));
#else  // kt:bind
  const int seen = min(hidden, q + 1);
#endif  // kt:bind
  float v[IT][KT_VEC];
  rows_load<0, KT_VEC, IT, P>(x + off, seen, v, lead);  // the vector path may read past `seen`, never past the row
  const float div = row_div != nullptr && active ? row_div[row] : 1.f;
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
#if KT_EXPERT_LOGIT_DIVIDE == 1  // kt:bind
      v[i][j] = row_div != nullptr ? v[i][j] / scale / div : v[i][j] / scale;
#else  // kt:bind
      v[i][j] = row_div != nullptr ? v[i][j] * scale / div : v[i][j] * scale;
#endif  // kt:bind
#if KT_EXPERT_ROUND_SCALED  // kt:bind
      v[i][j] = round_t<T>(v[i][j]);  // the scaled logit rounded to the scores' type
#endif  // kt:bind
      if (rows_in(rows_elem<0, KT_VEC, IT, P>(i, j, lead), seen)) m = fmaxf(m, v[i][j]);
    }
  m = row_reduce<0, KT_ROWS, 0>(m, Max(), -INFINITY);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
      const float e = rows_in(rows_elem<0, KT_VEC, IT, P>(i, j, lead), seen) ? expf(v[i][j] - m) : 0.f;
      v[i][j] = e;
      s += e;
    }
  s = row_reduce<0, KT_ROWS, 1>(s, Sum(), 0.f);
  const float inv = s > 0.f ? 1.f / s : 0.f;  // one division per row, not per element
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] * inv;
#if KT_EXPERT_CAUSAL_KEEP  // kt:bind
  // the seen keys only: the vector path stores as the peeled one at lead 0 (the same layout), so the vector that
  // holds the last seen key is written an element at a time and nothing past `seen` is touched
  if (active) rows_store<0, KT_VEC, IT, P == 0 ? 0 : 2>(out + off, seen, v, lead);
#else  // kt:bind
  if (active) rows_store<0, KT_VEC, IT, P>(out + off, hidden, v, lead);
#endif  // kt:bind
}

template <typename T, typename O>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        int q_len) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O>(out, x, rows, hidden, scale, row_div, q_len)));
}
#else  // kt:bind
#if KT_EXPERT_MASK_BIAS + KT_EXPERT_ALIBI_BIAS + (KT_EXPERT_MASK == 7)  // kt:bind
// Row `trow` of a nullable tensor of rows of `hidden` elements, read as the row is (null: zeros): the additive bias
// beside a mask (Evoformer's, ByteTransformer's, Swin's).
template <int IT, int P, typename M>
__device__ __forceinline__ void tensor_row_or_zero(const M* __restrict__ t, long long trow, int hidden,
                                                   float (&out)[IT][KT_VEC], int lead) {
  if (t != nullptr) {
#pragma unroll
    for (int i = 0; i < IT; ++i) rows_weight_item<0, KT_VEC, IT, P>(t + trow * hidden, hidden, i, out[i], lead);
  } else {
#pragma unroll
    for (int i = 0; i < IT; ++i)
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) out[i][j] = 0.f;
  }
}
#endif  // kt:bind
#if KT_EXPERT_MASK_BIAS  // kt:bind
// Row r's row of a tensor of t_rows rows broadcast over the score rows: rows [outer, mid, inner] over a tensor
// [outer % (t_rows / inner), inner] -- mid the extent between the tensor's two dimensions (0: rows / t_rows, the one
// broadcast dimension of the additive mask), the tensor's outer index wrapped (Swin's window mask [windows, N] over
// scores [batch, windows, heads, N]: mid = heads).
__device__ __forceinline__ long long broadcast_row(int r, int rows, int t_rows, int inner, int mid) {
  const int m = mid > 0 ? mid : rows / t_rows;
  return (long long)((r / (m * inner)) % (t_rows / inner)) * inner + r % inner;
}
#endif  // kt:bind
// The general form: softmax(x * scale / row_div[row]) (row_div null: no division) written to O, which may differ
// from the input's type (fp16 logits to fp32 probabilities).
#if KT_EXPERT_SINK  // kt:bind
// With a sink logit per head (gpt-oss attention sinks): one more logit a row, sinks[h] of the row's head h = (r /
// sink_inner) % sink_heads (rows [outer, sink_heads, sink_inner]), that takes part in the row's max and in the
// denominator but has no output column: m = max(max_k l_k, sink), p_k = exp(l_k - m) / (sum_k exp(l_k - m) +
// exp(sink - m)), l the logits as below (the sink itself neither scaled nor divided), rounded once at the store.
#endif  // kt:bind
#if KT_EXPERT_MASK  // kt:bind
// With an additive mask (null: none) of mask_rows rows of hidden elements: softmax(x * scale / row_div[row] + mask),
// row r = (o, b, i) of rows [outer, rows / mask_rows, mask_inner] reading mask row (o, i).
#if KT_EXPERT_SINK  // kt:bind
template <int IT, int P, typename T, typename O, typename M, typename S>
#else  // kt:bind
template <int IT, int P, typename T, typename O, typename M>
#endif  // kt:bind
__device__ __forceinline__ void softmax_impl(O* __restrict__ out, const T* __restrict__ x, int rows, int hidden,
                                             float scale, const float* __restrict__ row_div,
#if KT_EXPERT_SINK  // kt:bind
                                             const M* __restrict__ mask, int mask_rows, int mask_inner,
                                             const S* __restrict__ sinks, int sink_heads, int sink_inner) {
#elif KT_EXPERT_KEYS and KT_EXPERT_KEYS_INNER  // kt:bind
                                             const M* __restrict__ mask, int mask_rows, int mask_inner,
                                             const int* __restrict__ key_end, const int* __restrict__ key_start,
                                             int q_len, int batches, int keys_inner) {
#elif KT_EXPERT_KEYS  // kt:bind
                                             const M* __restrict__ mask, int mask_rows, int mask_inner,
                                             const int* __restrict__ key_end, const int* __restrict__ key_start,
                                             int q_len, int batches) {
#elif KT_EXPERT_ALIBI  // kt:bind
#if KT_EXPERT_ALIBI_BIAS  // kt:bind
                                             const M* __restrict__ mask, int mask_rows, int mask_inner,
                                             const M* __restrict__ slopes, int bias_rows, int bias_inner) {
#else  // kt:bind
                                             const M* __restrict__ mask, int mask_rows, int mask_inner,
                                             const M* __restrict__ slopes) {
#endif  // kt:bind
#elif KT_EXPERT_MASK == 7  // kt:bind
                                             const M* __restrict__ mask, int mask_rows, int mask_inner, float fill,
                                             const M* __restrict__ bias, int bias_rows, int bias_inner) {
#elif KT_EXPERT_MASK_BIAS  // kt:bind
                                             const M* __restrict__ mask, int mask_rows, int mask_inner, int mask_mid,
                                             const M* __restrict__ bias, int bias_rows, int bias_inner,
                                             int bias_mid) {
#else  // kt:bind
                                             const M* __restrict__ mask, int mask_rows, int mask_inner) {
#endif  // kt:bind
#elif KT_EXPERT_SINK  // kt:bind
template <int IT, int P, typename T, typename O, typename S>
__device__ __forceinline__ void softmax_impl(O* __restrict__ out, const T* __restrict__ x, int rows, int hidden,
                                             float scale, const float* __restrict__ row_div,
                                             const S* __restrict__ sinks, int sink_heads, int sink_inner) {
#elif KT_EXPERT_KEYS and KT_EXPERT_KEYS_INNER  // kt:bind
template <int IT, int P, typename T, typename O>
__device__ __forceinline__ void softmax_impl(O* __restrict__ out, const T* __restrict__ x, int rows, int hidden,
                                             float scale, const float* __restrict__ row_div,
                                             const int* __restrict__ key_end, const int* __restrict__ key_start,
                                             int q_len, int batches, int keys_inner) {
#elif KT_EXPERT_KEYS  // kt:bind
template <int IT, int P, typename T, typename O>
__device__ __forceinline__ void softmax_impl(O* __restrict__ out, const T* __restrict__ x, int rows, int hidden,
                                             float scale, const float* __restrict__ row_div,
                                             const int* __restrict__ key_end, const int* __restrict__ key_start,
                                             int q_len, int batches) {
#elif KT_EXPERT_X_STRIDE  // kt:bind
template <int IT, int P, typename T, typename O>
__device__ __forceinline__ void softmax_impl(O* __restrict__ out, const T* __restrict__ x, int rows, int hidden,
                                             float scale, const float* __restrict__ row_div, long long x_stride) {
#else  // kt:bind
template <int IT, int P, typename T, typename O>
__device__ __forceinline__ void softmax_impl(O* __restrict__ out, const T* __restrict__ x, int rows, int hidden,
                                             float scale, const float* __restrict__ row_div) {
#endif  // kt:bind
#if KT_EXPERT_KEYS  // kt:bind
  // rows [batches, rows / batches], the batch blockIdx.z * gridDim.y + blockIdx.y (a grid's y holds 65535: more
  // batches fold into z, the blocks past the last batch idle): its key range [k0, k1) (ONNX Runtime's 1-D mask index,
  // key_start null: from 0), clamped to the row
  const int per = rows / batches;
  const int bz = (int)(blockIdx.z * gridDim.y + blockIdx.y);
  const int b = bz < batches ? bz : batches - 1;
  const int in_batch = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = in_batch < per && bz < batches;
  const int row = b * per + (active ? in_batch : 0);
  const long long off = (long long)row * hidden;
  const int lead = rows_lead<P, KT_VEC>(off);
#if KT_EXPERT_KEYS_INNER  // kt:bind
  // the buffers [batches, keys_inner]: the row's entry b * keys_inner + its query, the row of its batch % keys_inner
  const int kq = b * keys_inner + (active ? in_batch : 0) % keys_inner;
  int k0 = key_start != nullptr ? max(0, key_start[kq]) : 0;
  int k1 = min(hidden, key_end[kq]);
#else  // kt:bind
  int k0 = key_start != nullptr ? max(0, key_start[b]) : 0;
  int k1 = min(hidden, key_end[b]);
#endif  // kt:bind
#if KT_EXPERT_KEYS == 1  // kt:bind
  if (k0 >= k1) {  // no key in the range: every key (attend to none = attend to all)
    k0 = 0;
    k1 = hidden;
  }
#endif  // kt:bind
  if (q_len > 0) k1 = min(k1, hidden - q_len + row % q_len + 1);  // causal, bottom-right: query row % q_len
  const int kn = max(k1, 0);  // the keys from kn on are not read (the vector path may read past kn, never past the row)
  float v[IT][KT_VEC];
  rows_load<0, KT_VEC, IT, P>(x + off, kn, v, lead);
#elif KT_EXPERT_X_STRIDE  // kt:bind
  // the input row at its own stride: the dispatch gives the peeled path only where it keeps the output's lead
  const int row = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = row < rows;
#if KT_EXPERT_X_STRIDE == 2  // kt:bind
  const long long off = (long long)(active ? row : 0) * x_stride;  // the output rows at the input's stride
#else  // kt:bind
  const long long off = (long long)(active ? row : 0) * hidden;
#endif  // kt:bind
  const int lead = rows_lead<P, KT_VEC>(off);
  float v[IT][KT_VEC];
  rows_load<0, KT_VEC, IT, P>(x + (long long)(active ? row : 0) * x_stride, hidden, v, lead);
#else  // kt:bind
  const int row = blockIdx.x * KT_ROWS + threadIdx.y;
  const bool active = row < rows;
  const long long off = (long long)(active ? row : 0) * hidden;
  const int lead = rows_lead<P, KT_VEC>(off);
  float v[IT][KT_VEC];
  rows_load<0, KT_VEC, IT, P>(x + off, hidden, v, lead);
#endif  // kt:bind
  const float div = row_div != nullptr && active ? row_div[row] : 1.f;
#if KT_EXPERT_SINK  // kt:bind
  const float sink = to_f(sinks[((active ? row : 0) / sink_inner) % sink_heads]);  // the row's head's sink logit
#endif  // kt:bind
#if KT_EXPERT_MASK == 4  // kt:bind
  float mk[IT][KT_VEC];  // 0 for a key kept, -inf for one left out
  const int r = active ? row : 0;
  const long long mrow = (long long)(r / ((rows / mask_rows) * mask_inner)) * mask_inner + r % mask_inner;
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    // the keep bytes read as the row is (VEC of them in one access on the vector path), each exactly 0.f or not
    rows_weight_item<0, KT_VEC, IT, P>(mask + mrow * hidden, hidden, i, mk[i], lead);
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j)
      mk[i][j] = rows_in(rows_elem<0, KT_VEC, IT, P>(i, j, lead), hidden) && mk[i][j] == 0.f ? -INFINITY : 0.f;
  }
#elif KT_EXPERT_MASK >= 5  // kt:bind
  float mk[IT][KT_VEC];  // the mask's bytes, read as the row is: nonzero for a key masked out
  const int r = active ? row : 0;
  const long long mrow = (long long)(r / ((rows / mask_rows) * mask_inner)) * mask_inner + r % mask_inner;
#pragma unroll
  for (int i = 0; i < IT; ++i) rows_weight_item<0, KT_VEC, IT, P>(mask + mrow * hidden, hidden, i, mk[i], lead);
#if KT_EXPERT_MASK == 7  // kt:bind
  float bk[IT][KT_VEC];  // the additive bias (null: none), its rows broadcast by its own extents
  const long long brow = (long long)(r / ((rows / bias_rows) * bias_inner)) * bias_inner + r % bias_inner;
  tensor_row_or_zero<IT, P>(bias, brow, hidden, bk, lead);
#endif  // kt:bind
#elif KT_EXPERT_MASK  // kt:bind
  float mk[IT][KT_VEC];
  const int r = active ? row : 0;
#if KT_EXPERT_MASK_BIAS  // kt:bind
  const long long mrow = broadcast_row(r, rows, mask_rows, mask_inner, mask_mid);
#else  // kt:bind
  const long long mrow = (long long)(r / ((rows / mask_rows) * mask_inner)) * mask_inner + r % mask_inner;
#endif  // kt:bind
  if (mask != nullptr) {
#pragma unroll
#if KT_EXPERT_KEYS  // kt:bind
    for (int i = 0; i < IT; ++i) rows_weight_item<0, KT_VEC, IT, P>(mask + mrow * hidden, kn, i, mk[i], lead);
#else  // kt:bind
    for (int i = 0; i < IT; ++i) rows_weight_item<0, KT_VEC, IT, P>(mask + mrow * hidden, hidden, i, mk[i], lead);
#endif  // kt:bind
  } else {
#pragma unroll
    for (int i = 0; i < IT; ++i)
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) mk[i][j] = 0.f;
  }
#if KT_EXPERT_MASK_BIAS  // kt:bind
  float bk[IT][KT_VEC];  // the second additive tensor (null: none), its rows broadcast by its own extents
  tensor_row_or_zero<IT, P>(bias, broadcast_row(r, rows, bias_rows, bias_inner, bias_mid), hidden, bk, lead);
#endif  // kt:bind
#endif  // kt:bind
#if KT_EXPERT_ALIBI_BIAS  // kt:bind
  {  // the bias tensor's element (its rows broadcast by their own extents), then + (1 - mask) * -10000
    float bk[IT][KT_VEC];
    const long long brow = (long long)(r / ((rows / bias_rows) * bias_inner)) * bias_inner + r % bias_inner;
    tensor_row_or_zero<IT, P>(slopes, brow, hidden, bk, lead);
#pragma unroll
    for (int i = 0; i < IT; ++i)
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) mk[i][j] = bk[i][j] + (1.f - mk[i][j]) * -10000.f;
  }
#elif KT_EXPERT_ALIBI  // kt:bind
  {  // FasterTransformer's bias: 0 + slope * (k - q), then + (1 - mask) * -10000 (1 keep, 0 masked)
    const int q = r % mask_inner;
    const float slope = slopes != nullptr ? to_f(slopes[(r / mask_inner) % (rows / mask_rows)]) : 0.f;
#pragma unroll
    for (int i = 0; i < IT; ++i)
#pragma unroll
      for (int j = 0; j < KT_VEC; ++j) {
        float bias = 0.f;
        if (slopes != nullptr) bias += slope * (float)(rows_elem<0, KT_VEC, IT, P>(i, j, lead) - q);
        mk[i][j] = bias + (1.f - mk[i][j]) * -10000.f;
      }
  }
#endif  // kt:bind
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
#if KT_EXPERT_LOGIT_DIVIDE == 1  // kt:bind
      v[i][j] = row_div != nullptr ? v[i][j] / scale / div : v[i][j] / scale;
#else  // kt:bind
      v[i][j] = row_div != nullptr ? v[i][j] * scale / div : v[i][j] * scale;
#endif  // kt:bind
#if KT_EXPERT_ROUND_SCALED  // kt:bind
      v[i][j] = round_t<T>(v[i][j]);  // the scaled logit rounded to the scores' type before the mask is added
#endif  // kt:bind
#if KT_EXPERT_MASK == 7  // kt:bind
      v[i][j] += bk[i][j];  // the bias added to the logit
#elif KT_EXPERT_MASK >= 5  // kt:bind
      if (mk[i][j] != 0.f) v[i][j] = -10000.f;  // a masked key's logit replaced by the fill value
#elif KT_EXPERT_MASK  // kt:bind
      v[i][j] += mk[i][j];
#if KT_EXPERT_MASK_BIAS  // kt:bind
      v[i][j] += bk[i][j];  // then the second tensor, in the kernel's order
#endif  // kt:bind
#endif  // kt:bind
#if KT_EXPERT_ROUND_SCALED == 2  // kt:bind
      v[i][j] = round_t<T>(v[i][j]);  // and the sum with the mask (of the scores' type) rounded again
#endif  // kt:bind
#if KT_EXPERT_MASK == 7  // kt:bind
      if (mk[i][j] == 0.f) v[i][j] = fill;  // a key the keep-mask leaves out: its logit replaced by the fill
#endif  // kt:bind
#if KT_EXPERT_KEYS  // kt:bind
      const int k = rows_elem<0, KT_VEC, IT, P>(i, j, lead);
      if (k >= k0 && k < k1) m = fmaxf(m, v[i][j]);  // the range's keys only
#else  // kt:bind
      if (rows_in(rows_elem<0, KT_VEC, IT, P>(i, j, lead), hidden)) m = fmaxf(m, v[i][j]);
#endif  // kt:bind
    }
  m = row_reduce<0, KT_ROWS, 0>(m, Max(), -INFINITY);
#if KT_EXPERT_SINK  // kt:bind
  m = fmaxf(m, sink);  // the sink takes part in the row's max
#endif  // kt:bind
#if KT_EXPERT_MASK == 4  // kt:bind
  if (m == -INFINITY) m = 0.f;  // every key left out: each exp below is 0 and the row is written as 0
#endif  // kt:bind
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) {
#if KT_EXPERT_KEYS  // kt:bind
      const int k = rows_elem<0, KT_VEC, IT, P>(i, j, lead);
      const float e = k >= k0 && k < k1 ? expf(v[i][j] - m) : 0.f;  // a key outside the range is written 0
#elif KT_EXPERT_ALIBI == 2  // kt:bind
      const float e = rows_in(rows_elem<0, KT_VEC, IT, P>(i, j, lead), hidden) ? expf(v[i][j] - m) : 0.f;
#elif KT_EXPERT_ALIBI  // kt:bind
      const float e = rows_in(rows_elem<0, KT_VEC, IT, P>(i, j, lead), hidden) ? __expf(v[i][j] - m) : 0.f;
#else  // kt:bind
      const float e = rows_in(rows_elem<0, KT_VEC, IT, P>(i, j, lead), hidden) ? expf(v[i][j] - m) : 0.f;
#endif  // kt:bind
#if KT_EXPERT_LOG  // kt:bind
      s += e;  // the logit kept: the output is l - (m + logf(s))
#else  // kt:bind
      v[i][j] = e;
      s += e;
#endif  // kt:bind
    }
#if KT_EXPERT_SINK  // kt:bind
  // the sink's exponential joins the denominator (it has no column of its own)
  const float total = row_reduce<0, KT_ROWS, 1>(s, Sum(), 0.f) + expf(sink - m);
#if KT_EXPERT_MASK == 4  // kt:bind
  const float inv = total > 0.f ? 1.f / total : 0.f;
#else  // kt:bind
  const float inv = 1.f / total;  // one division per row, not per element
#endif  // kt:bind
#elif KT_EXPERT_MASK == 5  // kt:bind
  // every key masked: the row's max is the fill value itself, and the row is written as 0
  const float total = row_reduce<0, KT_ROWS, 1>(s, Sum(), 0.f);
  const float inv = m == -10000.f ? 0.f : 1.f / total;
#elif KT_EXPERT_MASK == 4 or KT_EXPERT_KEYS  // kt:bind
  const float total = row_reduce<0, KT_ROWS, 1>(s, Sum(), 0.f);
  const float inv = total > 0.f ? 1.f / total : 0.f;
#elif KT_EXPERT_LOG  // kt:bind
  const float lse = m + logf(row_reduce<0, KT_ROWS, 1>(s, Sum(), 0.f));  // the row's log-sum-exp, once
#elif KT_EXPERT_ALIBI  // kt:bind
  const float inv = __fdividef(1.f, row_reduce<0, KT_ROWS, 1>(s, Sum(), 0.f) + 1e-6f);  // FasterTransformer's
#else  // kt:bind
  const float inv = 1.f / row_reduce<0, KT_ROWS, 1>(s, Sum(), 0.f);  // one division per row, not per element
#endif  // kt:bind
#pragma unroll
  for (int i = 0; i < IT; ++i)
#pragma unroll
#if KT_EXPERT_LOG  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] - lse;
#else  // kt:bind
    for (int j = 0; j < KT_VEC; ++j) v[i][j] = v[i][j] * inv;
#endif  // kt:bind
  if (active) rows_store<0, KT_VEC, IT, P>(out + off, hidden, v, lead);
}

#if KT_EXPERT_SINK  // kt:bind
#if KT_EXPERT_MASK  // kt:bind
template <typename T, typename O, typename M, typename S>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const M* mask, int mask_rows, int mask_inner, const S* sinks, int sink_heads,
                                        int sink_inner) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) &&
                   (mask == nullptr || vec_ok<M, KT_VEC>(hidden, mask))),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O, M, S>(out, x, rows, hidden, scale, row_div, mask, mask_rows, mask_inner,
                                                   sinks, sink_heads, sink_inner)));
}
#else  // kt:bind
template <typename T, typename O, typename S>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const S* sinks, int sink_heads, int sink_inner) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O, S>(out, x, rows, hidden, scale, row_div, sinks, sink_heads, sink_inner)));
}
#endif  // kt:bind
#elif KT_EXPERT_MASK and KT_EXPERT_KEYS and KT_EXPERT_KEYS_INNER  // kt:bind
template <typename T, typename O, typename M>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const M* mask, int mask_rows, int mask_inner, const int* key_end,
                                        const int* key_start, int q_len, int batches, int keys_inner) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) &&
                   (mask == nullptr || vec_ok<M, KT_VEC>(hidden, mask))),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O, M>(out, x, rows, hidden, scale, row_div, mask, mask_rows, mask_inner,
                                                key_end, key_start, q_len, batches, keys_inner)));
}
#elif KT_EXPERT_MASK and KT_EXPERT_KEYS  // kt:bind
template <typename T, typename O, typename M>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const M* mask, int mask_rows, int mask_inner, const int* key_end,
                                        const int* key_start, int q_len, int batches) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) &&
                   (mask == nullptr || vec_ok<M, KT_VEC>(hidden, mask))),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O, M>(out, x, rows, hidden, scale, row_div, mask, mask_rows, mask_inner,
                                                key_end, key_start, q_len, batches)));
}
#elif KT_EXPERT_MASK and KT_EXPERT_ALIBI_BIAS  // kt:bind
template <typename T, typename O, typename M>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const M* mask, int mask_rows, int mask_inner, const M* bias, int bias_rows,
                                        int bias_inner) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) &&
                   (mask == nullptr || vec_ok<M, KT_VEC>(hidden, mask)) &&
                   (bias == nullptr || vec_ok<M, KT_VEC>(hidden, bias))),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O, M>(out, x, rows, hidden, scale, row_div, mask, mask_rows, mask_inner,
                                                bias, bias_rows, bias_inner)));
}
#elif KT_EXPERT_MASK and KT_EXPERT_ALIBI  // kt:bind
template <typename T, typename O, typename M>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const M* mask, int mask_rows, int mask_inner, const M* slopes) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) &&
                   (mask == nullptr || vec_ok<M, KT_VEC>(hidden, mask))),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O, M>(out, x, rows, hidden, scale, row_div, mask, mask_rows, mask_inner,
                                                slopes)));
}
#elif KT_EXPERT_MASK and KT_EXPERT_MASK_BIAS  // kt:bind
template <typename T, typename O, typename M>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const M* mask, int mask_rows, int mask_inner, int mask_mid, const M* bias,
                                        int bias_rows, int bias_inner, int bias_mid) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) &&
                   (mask == nullptr || vec_ok<M, KT_VEC>(hidden, mask)) &&
                   (bias == nullptr || vec_ok<M, KT_VEC>(hidden, bias))),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O, M>(out, x, rows, hidden, scale, row_div, mask, mask_rows, mask_inner,
                                                mask_mid, bias, bias_rows, bias_inner, bias_mid)));
}
#elif KT_EXPERT_MASK == 7  // kt:bind
template <typename T, typename O, typename M>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const M* mask, int mask_rows, int mask_inner, float fill, const M* bias,
                                        int bias_rows, int bias_inner) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) && vec_ok<M, KT_VEC>(hidden, mask) &&
                   (bias == nullptr || vec_ok<M, KT_VEC>(hidden, bias))),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O, M>(out, x, rows, hidden, scale, row_div, mask, mask_rows, mask_inner, fill,
                                                bias, bias_rows, bias_inner)));
}
#elif KT_EXPERT_MASK  // kt:bind
template <typename T, typename O, typename M>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const M* mask, int mask_rows, int mask_inner) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out) &&
                   (mask == nullptr || vec_ok<M, KT_VEC>(hidden, mask))),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O, M>(out, x, rows, hidden, scale, row_div, mask, mask_rows, mask_inner)));
}
#elif KT_EXPERT_KEYS and KT_EXPERT_KEYS_INNER  // kt:bind
template <typename T, typename O>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const int* key_end, const int* key_start, int q_len, int batches,
                                        int keys_inner) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O>(out, x, rows, hidden, scale, row_div, key_end, key_start, q_len,
                                             batches, keys_inner)));
}
#elif KT_EXPERT_KEYS  // kt:bind
template <typename T, typename O>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        const int* key_end, const int* key_start, int q_len, int batches) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O>(out, x, rows, hidden, scale, row_div, key_end, key_start, q_len,
                                             batches)));
}
#elif KT_EXPERT_X_STRIDE  // kt:bind
template <typename T, typename O>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div,
                                        long long x_stride) {
  // vector rows need the stride a multiple of the vector; the peeled rows the same lead as the output's (rows at one
  // stride in and out: the same lead always)
#if KT_EXPERT_X_STRIDE == 2  // kt:bind
  constexpr bool one_stride = true;
#else  // kt:bind
  constexpr bool one_stride = false;
#endif  // kt:bind
  KT_DISPATCH_ROW((int)blockDim.x, hidden,
                  (vec_ok<T, KT_VEC>(hidden, x) && x_stride % KT_VEC == 0 && vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out) &&
                   (one_stride || (x_stride - hidden) % KT_VEC == 0)),
                  (softmax_impl<IT, P, T, O>(out, x, rows, hidden, scale, row_div, x_stride)));
}
#else  // kt:bind
template <typename T, typename O>
__device__ __forceinline__ void softmax(O* out, const T* x, int rows, int hidden, float scale, const float* row_div) {
  KT_DISPATCH_ROW((int)blockDim.x, hidden, (vec_ok<T, KT_VEC>(hidden, x) && vec_ok<O, KT_VEC>(hidden, out)),
                  (vec_ok<T, KT_VEC>(0, x) && vec_ok<O, KT_VEC>(0, out)),
                  (softmax_impl<IT, P, T, O>(out, x, rows, hidden, scale, row_div)));
}
#endif  // kt:bind

#endif  // kt:bind
#endif  // kt:bind

}  // namespace kt
