// Rotary embedding in the style of Helion (pytorch/helion, examples/rope.py: rope_fwd, the forward of
// RoPEFunction / rope(q, k, cos, sin) and of the TritonBench rope operator wrapper rope_tritonbench; Helion is the
// PyTorch team's tile-level kernel DSL that compiles to Triton), written as the CUDA port of the Triton program Helion
// generates for it:
//   q [batch, q_heads, seq_len, head_dim] and k [batch, k_heads, seq_len, head_dim] (HEAD-MAJOR BHSD, the layout of
//   the attention's transposed projections), k with its own head count (GQA: 32 query heads, 8 key heads); cos and
//   sin [batch, seq_len, head_dim] in the activations' dtype as Hugging Face's LlamaRotaryEmbedding returns them
//   (full width, cat(freqs, freqs): the kernel reads BOTH halves, cos_first = cos[..., :D/2] for the first half of
//   the output and cos_second = cos[..., D/2:] for the second, through reshape(.., 2, D/2).permute + hl.split);
//   NeoX halves: out_first = q1 * cos_first - q2 * sin_first, out_second = q2 * cos_second + q1 * sin_second, fp32
//   math (.to(torch.float32)), one rounding to fp16 at the store (.to(q_out.dtype)); OUT OF PLACE (new q_out, k_out).
//   for tile_b, tile_t in hl.tile([batch, seq_len]): one program per (batch tile, token tile) holding EVERY head of
//   q and of k for its tokens; the 2-D tile grid is flattened into one program id the way Helion's flat pid type
//   does it (pid_0 = pid % cdiv(batch, BLOCK_B) fastest, pid_1 = pid / cdiv(batch, BLOCK_B)). Block sizes and warps
//   are autotuned by Helion: fixed here at tile_b = 1, tile_t = 16 tokens, 4 warps (128 threads); template <T,
//   BLOCK_B, BLOCK_T, NUM_WARPS>, spec = <__half, 1, 16, 4>.
//   Port: the program's (token, pair) positions spread over the 128 threads; each thread loads its cos/sin quadruple
//   once (the cos/sin tile is loaded once per program and broadcast over the heads in the Triton code) and loops over
//   the q heads, then the k heads; scalar fp16 loads and stores.
// No bug found. Changed: the Helion kernel's backward and autograd wrapper are not ported; the Python call became a
// C++ launcher with device pointers, sizes and a stream.
#include <assert.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace helion_examples {

constexpr int kBlockB = 1;    // block_sizes[0]: batch tile
constexpr int kBlockT = 16;   // block_sizes[1]: token tile
constexpr int kNumWarps = 4;

/* kerntune:
args  = ["q: in f16[B * Hq * S * 128]", "k: in f16[B * Hk * S * 128]", "cos: in f16[B * S * 128] ~ uniform(-1, 1)",
         "sin: in f16[B * S * 128] ~ uniform(-1, 1)", "q_out: out f16[B * Hq * S * 128]",
         "k_out: out f16[B * Hk * S * 128]", "batch: i32 = B", "q_heads: i32 = Hq", "k_heads: i32 = Hk",
         "seq_len: i32 = S", "head_dim: i32 = 128"]
sizes = [{ B = 1, S = 8192, Hq = 32, Hk = 8 }, { B = 4, S = 1, Hq = 32, Hk = 8 }, { B = 3, S = 999, Hq = 28, Hk = 4 }]
grid  = "B * cdiv(S, 16)"
block = 128
template_args = ["__half", "1", "16", "4"]
*/
template <typename T, int BLOCK_B, int BLOCK_T, int NUM_WARPS>
__global__ void __launch_bounds__(NUM_WARPS * 32)
    _helion_rope_fwd(const T* q, const T* k, const T* cos, const T* sin, T* q_out, T* k_out, int batch, int q_heads,
                     int k_heads, int seq_len, int head_dim) {
  constexpr int THREADS = NUM_WARPS * 32;
  const int num_blocks_0 = (batch + BLOCK_B - 1) / BLOCK_B;
  const int pid_0 = blockIdx.x % num_blocks_0;  // tile_b
  const int pid_1 = blockIdx.x / num_blocks_0;  // tile_t
  const int half_dim = head_dim / 2;
  const int tile_elems = BLOCK_B * BLOCK_T * half_dim;

  for (int e = threadIdx.x; e < tile_elems; e += THREADS) {
    const int i = e % half_dim;
    const int tt = (e / half_dim) % BLOCK_T;
    const int tb = e / (half_dim * BLOCK_T);
    const int b = pid_0 * BLOCK_B + tb;
    const int t = pid_1 * BLOCK_T + tt;
    if (b >= batch || t >= seq_len) continue;

    // cos[tile_b, tile_t, :] -> (cos_first, cos_second), the same for sin
    const int64_t cs = ((int64_t)b * seq_len + t) * head_dim;
    const float cos_first = static_cast<float>(cos[cs + i]);
    const float cos_second = static_cast<float>(cos[cs + half_dim + i]);
    const float sin_first = static_cast<float>(sin[cs + i]);
    const float sin_second = static_cast<float>(sin[cs + half_dim + i]);

    for (int h = 0; h < q_heads; ++h) {
      const int64_t off = (((int64_t)b * q_heads + h) * seq_len + t) * head_dim;
      const float q_first = static_cast<float>(q[off + i]);
      const float q_second = static_cast<float>(q[off + half_dim + i]);
      q_out[off + i] = T(q_first * cos_first - q_second * sin_first);
      q_out[off + half_dim + i] = T(q_second * cos_second + q_first * sin_second);
    }
    for (int h = 0; h < k_heads; ++h) {
      const int64_t off = (((int64_t)b * k_heads + h) * seq_len + t) * head_dim;
      const float k_first = static_cast<float>(k[off + i]);
      const float k_second = static_cast<float>(k[off + half_dim + i]);
      k_out[off + i] = T(k_first * cos_first - k_second * sin_first);
      k_out[off + half_dim + i] = T(k_second * cos_second + k_first * sin_second);
    }
  }
}

}  // namespace helion_examples

// rope_fwd(q, k, cos, sin): q device [batch, q_heads, seq_len, head_dim], k [batch, k_heads, seq_len, head_dim],
// cos and sin [batch, seq_len, head_dim] (all contiguous, one dtype); q_out and k_out shaped like q and k.
template <typename T>
void rope_fwd(const T* q, const T* k, const T* cos, const T* sin, T* q_out, T* k_out, int batch, int q_heads,
              int k_heads, int seq_len, int head_dim, cudaStream_t stream) {
  assert(head_dim % 2 == 0);
  if (batch == 0 || seq_len == 0) return;
  using namespace helion_examples;
  const int grid = ((batch + kBlockB - 1) / kBlockB) * ((seq_len + kBlockT - 1) / kBlockT);
  _helion_rope_fwd<T, kBlockB, kBlockT, kNumWarps><<<grid, kNumWarps * 32, 0, stream>>>(
      q, k, cos, sin, q_out, k_out, batch, q_heads, k_heads, seq_len, head_dim);
}

template void rope_fwd<__half>(const __half*, const __half*, const __half*, const __half*, __half*, __half*, int, int,
                               int, int, int, cudaStream_t);
template void rope_fwd<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                                      const __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, int, int, int, int, int,
                                      cudaStream_t);
