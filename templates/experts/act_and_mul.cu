/* kerntune-expert:
name = "act_and_mul"
family = "gated_activation"
description = "Gated activation: out[r, i] = (T)act(x[r, i]) * x[r, d + i] with act = SiLU, GELU (erf) or GELU (tanh). 16-byte loads and stores, several vectors per thread, one block per chunk of a row, blocks in memory order (the chunks of a row, then the next row)."
function = "kt::act_and_mul"
roles = ["out: out T[rows * d]", "x: in T[rows * 2 * d]", "d: i32"]
constraints = ["VEC * ESIZE <= 16", "THREADS * VEC * ITEMS <= 4 * d + THREADS * VEC", "rows * cdiv(d, THREADS * VEC * ITEMS) <= 2147483647"]

[params.THREADS]
values = [64, 128, 256, 512, 1024]
default = 256
kind = "block_size"
why = "threads per block"

[params.VEC]
values = [1, 2, 4, 8]
default = 8
kind = "vector_width"
why = "elements per load/store: 16 bytes at most; scalar fallback when d or a pointer is not aligned"

[params.ITEMS]
values = [1, 2, 4]
default = 1
kind = "items_per_thread"
why = "vectors per thread (more independent loads in flight, fewer blocks)"

[launch]
grid = ["rows * cdiv(d, THREADS * VEC * ITEMS)"]
block = ["THREADS"]
smem = "0"
*/
#ifndef KT_THREADS
#define KT_THREADS 256
#endif
#ifndef KT_VEC
#define KT_VEC 8
#endif
#ifndef KT_ITEMS
#define KT_ITEMS 1
#endif
#ifndef KT_EXPERT_ACT
#define KT_EXPERT_ACT 0  // 0: SiLU, 1: GELU (erf), 2: GELU (tanh approximation); set by the binding
#endif

namespace kt {

__device__ __forceinline__ float gate_act(float v) {
#if KT_EXPERT_ACT == 0
  return v / (1.f + expf(-v));
#elif KT_EXPERT_ACT == 1
  return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
#else
  return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
#endif
}

template <typename T>
__device__ __forceinline__ void act_and_mul(T* __restrict__ out, const T* __restrict__ x, int d) {
  constexpr int CHUNK = KT_THREADS * KT_VEC * KT_ITEMS;
  const int chunks = (d + CHUNK - 1) / CHUNK;  // blocks per row; consecutive blocks walk memory in order
  const long long row = blockIdx.x / chunks;
  const int base = (int)(blockIdx.x - row * chunks) * CHUNK;
  const int n = d - base;
  const T* a = x + row * 2 * d + base;
  const T* g = a + d;
  T* o = out + row * d + base;
  const bool vec = vec_ok<T, KT_VEC>(d, x, out);
  float va[KT_ITEMS][KT_VEC], vg[KT_ITEMS][KT_VEC];
  row_load<KT_THREADS, KT_VEC, KT_ITEMS>(a, n, vec, va);
  row_load<KT_THREADS, KT_VEC, KT_ITEMS>(g, n, vec, vg);
#pragma unroll
  for (int i = 0; i < KT_ITEMS; ++i)
#pragma unroll
    for (int j = 0; j < KT_VEC; ++j) va[i][j] = round_t<T>(gate_act(va[i][j])) * vg[i][j];
  row_store<KT_THREADS, KT_VEC, KT_ITEMS>(o, n, vec, va);
}

}  // namespace kt
