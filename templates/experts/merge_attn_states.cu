/* kerntune-expert:
name = "merge_attn_states"
family = "merge_attn_states"
description = "Merge two partial attention outputs with their log-sum-exps: out = p * e^(lp - m) / S + s * e^(ls - m) / S with S = e^(lp - m) + e^(ls - m), out_lse = log(S) + m. 16-byte loads, several vectors per thread, grid-stride loop."
function = "kt::merge_attn_states"
roles = ["out: out T[tokens * heads * head_size]", "out_lse: out f32[tokens * heads] (optional)", "p: in T[tokens * heads * head_size]", "p_lse: in f32[tokens * heads]", "s: in T[tokens * heads * head_size]", "s_lse: in f32[tokens * heads]", "tokens: i32", "heads: i32", "head_size: i32"]
constraints = ["VEC * ESIZE <= 16"]

[params.THREADS]
values = [64, 128, 256, 512]
default = 128
kind = "block_size"
why = "threads per block"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load/store: 16 bytes at most; scalar fallback when head_size or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4]
default = 1
kind = "items_per_thread"
why = "vectors per thread: the grid is sized for ITEMS vectors per thread (grid-stride loop)"

[launch]
grid = ["cdiv(tokens * heads * head_size, THREADS * VEC * ITEMS)"]
block = ["THREADS"]
smem = "0"
*/
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

template <int VEC, typename T>
__device__ __forceinline__ void merge_slots(T* __restrict__ out, float* __restrict__ out_lse, const T* __restrict__ p,
                                            const float* __restrict__ p_lse, const T* __restrict__ s,
                                            const float* __restrict__ s_lse, int tokens, int heads, int head_size) {
  const int per_head = head_size / VEC;
  const long long slots = (long long)tokens * heads * per_head;
  for (long long slot = (long long)blockIdx.x * blockDim.x + threadIdx.x; slot < slots;
       slot += (long long)gridDim.x * blockDim.x) {
    const long long th = slot / per_head;  // token * heads + head
    const int part = (int)(slot - th * per_head);
    const int token = (int)(th / heads), head = (int)(th - (long long)token * heads);
#if KT_EXPERT_LSE_TOKEN_MAJOR
    const long long li = th;
#else
    const long long li = (long long)head * tokens + token;
#endif
    float pl = p_lse[li], sl = s_lse[li];
    pl = isinf(pl) ? -INFINITY : pl;
    sl = isinf(sl) ? -INFINITY : sl;
    const float m = fmaxf(pl, sl);
    const float pe = expf(pl - m), se = expf(sl - m);
    const float sum = pe + se;
    const float ps = pe / sum, ss = se / sum;
    const long long e = th * head_size + (long long)part * VEC;
    float a[VEC], b[VEC];
    if constexpr (VEC == 1) {
      a[0] = to_f(p[e]);
      b[0] = to_f(s[e]);
    } else {
      load_vec<T, VEC>(p + e, a);
      load_vec<T, VEC>(s + e, b);
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) a[j] = a[j] * ps + b[j] * ss;
    if constexpr (VEC == 1) out[e] = from_f<T>(a[0]);
    else store_vec<T, VEC>(out + e, a);
    if (out_lse != nullptr && part == 0) out_lse[li] = logf(sum) + m;
  }
}

template <typename T>
__device__ __forceinline__ void merge_attn_states(T* out, float* out_lse, const T* p, const float* p_lse, const T* s,
                                                  const float* s_lse, int tokens, int heads, int head_size) {
  if (vec_ok<T, KT_VEC>(head_size, out, p, s))
    merge_slots<KT_VEC>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size);
  else
    merge_slots<1>(out, out_lse, p, p_lse, s, s_lse, tokens, heads, head_size);
}

}  // namespace kt
