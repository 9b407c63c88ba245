// RoPE as Surogate writes it (invergent-ai/surogate, csrc/src/kernels/rope.cu rope_kernel behind rope_imp /
// rope_forward; a C++/CUDA LLM training framework grown from llm.c and IST Austria's llmq), bf16.
// Layout: ONE fused QKV activation [B, T, Nq + Nkv + Nkv, head_dim] (query heads, then key heads, then value
// heads of every token side by side), rotated OUT OF PLACE into a buffer of the same shape; the value heads are
// only copied (16-byte packs) when out != inp. Pairing: the head's halves (d, d + head_dim / 2), a "real" and an
// "imaginary" part, but the angle table is llm.c's freqs_cis [max_pos, rotary_dim] with cos and sin INTERLEAVED
// (cos(theta_i) at 2 i, sin(theta_i) at 2 i + 1), held in the activation dtype (bf16), indexed by an optional
// position_ids [B, T] (int32; nullptr means position t). Partial rotary (GLM-4 style): only pairs d < rotary_dim / 2
// are rotated, the rest pass through; a thread whose 4 pairs straddle the boundary takes a scalar path.
// Launch: flat, one thread per 4 consecutive pairs (x64 = 8-byte packs of 4 bf16 for each half, the freqs row read
// as one 16-byte x128 pack through the read-only path), 128 threads, grid ceil(pairs / 4 / 128); the qkv slot is
// decoded from the flat index so value-head threads copy and leave early. fp32 rotation, one rounding per store.
// Template <bool Backward, floatX> (backward = the same kernel with sin negated).
// Fixed: the flat index, the b / t offsets and the launcher's thread count were 32-bit ints, so a QKV activation of
// more than 2^31 elements (e.g. 8 sequences of 32k tokens with 80 heads of 128, a long-context training step)
// wrapped around; they are 64-bit here. Changed: the optional abs-max tracker for FP8 scaling (abs_max_ptr, its
// block reduction and the launcher's cudaMemsetAsync) is left out, and Surogate's GenericVector is reduced to a small
// aligned pack struct of our own. Requires head_dim % 8 == 0 and an even rotary_dim <= head_dim.
// Sizes: 2 x 4096 tokens of 32 query + 8 KV heads of 128; decode 4 x 1 token; tail 3 x 333 tokens of 7 + 1 heads
// of 64 with rotary_dim 32 (partial). Positions randint(0, 4096) into a 4096-row freqs_cis table.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#define CUDA_CHECK(call)                                                                        \
  do {                                                                                          \
    cudaError_t status_ = (call);                                                               \
    if (status_ != cudaSuccess) throw std::runtime_error(std::string("CUDA error: ") + #call);   \
  } while (0)

template <class T>
constexpr T div_ceil(T a, T b) {
  return (a + b - 1) / b;
}

// An N-element pack moved as one aligned load / store (8 bytes = "x64", 16 bytes = "x128").
template <class E, int N>
struct alignas(sizeof(E) * N) Pack {
  static constexpr int size = N;
  E e[N];
  __device__ E& operator[](int i) { return e[i]; }
  __device__ const E& operator[](int i) const { return e[i]; }

  using Raw = typename std::conditional<sizeof(E) * N == 16, int4,
                                        typename std::conditional<sizeof(E) * N == 8, int2, int>::type>::type;

  __device__ static Pack load(const E* p) { return *reinterpret_cast<const Pack*>(p); }
  __device__ static Pack load_cs(const E* p) {  // streaming: the input is read once
    Raw r = __ldcs(reinterpret_cast<const Raw*>(p));
    Pack out;
    memcpy(&out, &r, sizeof(Pack));
    return out;
  }
  __device__ static Pack load_ldg(const E* p) {  // read-only cache: the freqs table is shared by all heads
    Raw r = __ldg(reinterpret_cast<const Raw*>(p));
    Pack out;
    memcpy(&out, &r, sizeof(Pack));
    return out;
  }
  __device__ void store(E* p) const { *reinterpret_cast<Pack*>(p) = *this; }
};

/* kerntune:
args  = ["out: out bf16[B * T * (Nq + 2 * Nkv) * H]", "inp: in bf16[B * T * (Nq + 2 * Nkv) * H]",
         "freqs_cis: in bf16[4096 * R] ~ uniform(-1, 1)", "position_ids: in i32[B * T] ~ randint(0, 4096)",
         "B: i32 = B", "T: i32 = T", "Nq: i32 = Nq", "Nkv: i32 = Nkv", "head_dim: i32 = H", "rotary_dim: i32 = R"]
sizes = [{ B = 2, T = 4096, Nq = 32, Nkv = 8, H = 128, R = 128 }, { B = 4, T = 1, Nq = 32, Nkv = 8, H = 128, R = 128 },
         { B = 3, T = 333, Nq = 7, Nkv = 1, H = 64, R = 32 }]
grid  = "cdiv(B * T * (Nq + 2 * Nkv) * H / 8, 128)"
block = 128
template_args = ["false", "nv_bfloat16"]
*/
template <bool Backward, typename floatX>
__global__ void rope_kernel(floatX* out, const floatX* inp, const floatX* freqs_cis, const int* position_ids, int B,
                            int T, int Nq, int Nkv, int head_dim, int rotary_dim) {
  using x64 = Pack<floatX, 8 / sizeof(floatX)>;
  using x128 = Pack<floatX, 16 / sizeof(floatX)>;

  // first of the x64::size pairs this thread owns, counted over all heads of all tokens
  const int64_t idx = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * x64::size;
  const int head_dim_half = head_dim / 2;
  const int N = Nq + 2 * Nkv;
  if (idx >= (int64_t)B * T * N * head_dim_half) return;

  // which head (and whether it is a query, key or value head) before anything else
  int h = (int)((idx / head_dim_half) % N);
  int qkv = 2;
  if (h < Nq) {
    qkv = 0;
  } else if (h < Nq + Nkv) {
    qkv = 1;
    h -= Nq;
  }

  if (qkv == 2) {
    // value heads are not rotated; out of place they still have to reach the output
    if (out != inp) {
      x128::load_cs(inp + 2 * idx).store(out + 2 * idx);
    }
    return;
  }

  const int64_t b = idx / ((int64_t)T * N * head_dim_half);
  const int t = (int)((idx / ((int64_t)N * head_dim_half)) % T);
  const int d = (int)(idx % head_dim_half);
  const int t_pos = position_ids ? position_ids[b * T + t] : t;

  const int64_t idx_bt = b * ((int64_t)T * N * head_dim) + (int64_t)t * N * head_dim;
  const int64_t idx_bth = idx_bt + (int64_t)qkv * Nq * head_dim + (int64_t)h * head_dim;
  const int64_t idxi = idx_bth + d;

  const int rotary_dim_half = rotary_dim / 2;
  const x64 v_real = x64::load(inp + idxi);
  const x64 v_imag = x64::load(inp + idxi + head_dim_half);
  x64 o_real;
  x64 o_imag;

  if (d + x64::size <= rotary_dim_half) {
    // all pairs of this pack are rotated: their (cos, sin) pairs are one 16-byte row slice
    const x128 freqs = x128::load_ldg(freqs_cis + (int64_t)t_pos * rotary_dim + 2 * d);
    for (int k = 0; k < x64::size; k++) {
      const float c = (float)freqs[2 * k];
      float s = (float)freqs[2 * k + 1];
      if constexpr (Backward) {
        s = -s;
      }
      const float re = (float)v_real[k];
      const float im = (float)v_imag[k];
      o_real[k] = (floatX)(re * c - im * s);
      o_imag[k] = (floatX)(re * s + im * c);
    }
  } else if (d >= rotary_dim_half) {
    // past rotary_dim: copied through
    for (int k = 0; k < x64::size; k++) {
      o_real[k] = v_real[k];
      o_imag[k] = v_imag[k];
    }
  } else {
    // the pack straddles rotary_dim / 2: pair by pair
    for (int k = 0; k < x64::size; k++) {
      const int dk = d + k;
      if (dk < rotary_dim_half) {
        const float c = (float)freqs_cis[(int64_t)t_pos * rotary_dim + 2 * dk];
        float s = (float)freqs_cis[(int64_t)t_pos * rotary_dim + 2 * dk + 1];
        if constexpr (Backward) {
          s = -s;
        }
        const float re = (float)v_real[k];
        const float im = (float)v_imag[k];
        o_real[k] = (floatX)(re * c - im * s);
        o_imag[k] = (floatX)(re * s + im * c);
      } else {
        o_real[k] = v_real[k];
        o_imag[k] = v_imag[k];
      }
    }
  }
  o_real.store(out + idxi);
  o_imag.store(out + idxi + head_dim_half);
}

// One launch of rope_kernel: 128 threads, each owning x64::size pairs of one (token, head).
template <bool Backward, class floatX>
void rope_imp(floatX* out, const floatX* in, const floatX* freqs_cis, const int* position_ids, int B, int T, int Nq,
              int Nkv, int head_dim, int rotary_dim, cudaStream_t stream) {
  const int block_size = 128;
  using x64 = Pack<floatX, 8 / sizeof(floatX)>;
  assert(head_dim % (2 * x64::size) == 0);
  assert(rotary_dim % 2 == 0 && rotary_dim <= head_dim);
  const int64_t total_threads = ((int64_t)B * T * (Nq + 2 * Nkv) * head_dim / 2) / x64::size;
  const int num_blocks = (int)div_ceil<int64_t>(total_threads, block_size);
  rope_kernel<Backward><<<num_blocks, block_size, 0, stream>>>(out, in, freqs_cis, position_ids, B, T, Nq, Nkv,
                                                               head_dim, rotary_dim);
  CUDA_CHECK(cudaGetLastError());
}

// Partial RoPE (rotary_dim <= head_dim); out may equal in (in place: the value heads are then left alone).
void rope_forward(nv_bfloat16* out, const nv_bfloat16* in, const nv_bfloat16* freqs_cis, const int* position_ids,
                  int B, int T, int Nq, int Nkv, int head_dim, int rotary_dim, cudaStream_t stream) {
  rope_imp<false>(out, in, freqs_cis, position_ids, B, T, Nq, Nkv, head_dim, rotary_dim, stream);
}

void rope_forward(float* out, const float* in, const float* freqs_cis, const int* position_ids, int B, int T, int Nq,
                  int Nkv, int head_dim, int rotary_dim, cudaStream_t stream) {
  rope_imp<false>(out, in, freqs_cis, position_ids, B, T, Nq, Nkv, head_dim, rotary_dim, stream);
}

// Full RoPE: rotary_dim == head_dim.
void rope_forward(nv_bfloat16* out, const nv_bfloat16* in, const nv_bfloat16* freqs_cis, const int* position_ids,
                  int B, int T, int Nq, int Nkv, int head_dim, cudaStream_t stream) {
  rope_imp<false>(out, in, freqs_cis, position_ids, B, T, Nq, Nkv, head_dim, head_dim, stream);
}

// Backward: the inverse rotation of the incoming gradient.
void rope_backward(nv_bfloat16* dinp, const nv_bfloat16* dout, const nv_bfloat16* freqs_cis, const int* position_ids,
                   int B, int T, int Nq, int Nkv, int head_dim, int rotary_dim, cudaStream_t stream) {
  rope_imp<true>(dinp, dout, freqs_cis, position_ids, B, T, Nq, Nkv, head_dim, rotary_dim, stream);
}
