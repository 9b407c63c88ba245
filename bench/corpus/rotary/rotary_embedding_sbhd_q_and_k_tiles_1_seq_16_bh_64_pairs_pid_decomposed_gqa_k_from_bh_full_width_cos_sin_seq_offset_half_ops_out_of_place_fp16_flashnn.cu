// Rotary embedding as AlibabaPAI FLASHNN writes it (flashnn/triton_kernels/rotary_embedding.py,
// _rotary_embedding_kernel behind triton_rotary_embd_forward), ported from Triton to CUDA C++ with its default
// (non-autotuned) config: BLOCK_SIZE_SEQ = 1, BLOCK_SIZE_BH = 16, BLOCK_SIZE_D = 64, num_warps = 4. fp16 q
// [seq, batch, heads, D] and k [seq, batch, num_kv, D] (sequence-first SBHD, element strides passed in the Triton
// order s, b, h, d), separate FULL-WIDTH cos and sin tables [max_seq, D] (cos_l read at d, cos_r at D / 2 + d),
// NeoX halves: out_l = q_l * cos_l - q_r * sin_l, out_r = q_r * cos_r + q_l * sin_r, written OUT OF PLACE into q_rot
// and k_rot (same strides as q and k). The 1-D program id is decomposed bh-block fastest, then the D / 2 block, then
// the sequence block; each program (here a CTA of 128 threads) covers 1 token x 16 (batch, head) rows x 64 pairs,
// the threads striding the 1024 pairs of the tile (pair fastest, so a warp reads 32 consecutive halves). The k head
// of q row bh is bh // (heads / num_kv), computed from the FUSED (batch, head) index as the Triton kernel does (valid
// for the contiguous layouts it is called with). The arithmetic is fp16 like Triton's fp16 tensor ops: __hmul,
// __hsub, __hadd, each step rounded.
// Fixed: (1) the Triton grid cdiv(seq * B * H, BLOCK_SEQ * BLOCK_BH) * cdiv(D / 2, BLOCK_D) is smaller than the
// program space the kernel decomposes (seq * cdiv(B * H, 16) * ...) whenever 16 does not divide B * H, so the last
// tokens were never rotated; the grid is now the product of the three block counts. (2) q and k rows were indexed
// by seq_offset + s, the same index as the tables, so a nonzero offset read and wrote past the end of q and k; the
// offset now applies to the cos / sin rows only. (3) every q head of a GQA group rotated (and stored) the same k
// row, up to heads / num_kv duplicate writes of one address; only the group's first q head writes k now. Sizes:
// 2048 tokens x 8 x 32 heads (8 KV) x 128, a decode step of 8 sequences, 333 x 3 x 14 heads (2 KV) x 96 (48 pairs,
// 42 rows: a partial bh block and a partial pair block); tables carry 7 extra rows for seq_offset = 7.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

constexpr int BLOCK_SIZE_SEQ = 1;
constexpr int BLOCK_SIZE_BH = 16;
constexpr int BLOCK_SIZE_D = 64;
constexpr int NUM_THREADS = 4 * 32;  // num_warps = 4

__host__ __device__ inline int cdiv(int a, int b) { return (a + b - 1) / b; }

/* kerntune:
args  = ["q_rot: out f16[S * B * H * D]", "k_rot: out f16[S * B * KV * D]", "q: in f16[S * B * H * D]",
         "k: in f16[S * B * KV * D]", "cos_ptr: in f16[(S + 7) * D] ~ uniform(-1, 1)",
         "sin_ptr: in f16[(S + 7) * D] ~ uniform(-1, 1)",
         "seq_len: i32 = S", "batch_size: i32 = B", "num_heads: i32 = H", "num_kv: i32 = KV", "hidden_size: i32 = D",
         "q_strides: i32 = B * H * D", "q_strideb: i32 = H * D", "q_strideh: i32 = D", "q_strided: i32 = 1",
         "k_strides: i32 = B * KV * D", "k_strideb: i32 = KV * D", "k_stridekv: i32 = D", "k_strided: i32 = 1",
         "seq_offset: i32 = 7"]
sizes = [{ S = 2048, B = 8, H = 32, KV = 8, D = 128 }, { S = 1, B = 8, H = 32, KV = 8, D = 128 },
         { S = 333, B = 3, H = 14, KV = 2, D = 96 }]
grid  = "cdiv(S, 1) * cdiv(B * H, 16) * cdiv(D / 2, 64)"
block = 128
*/
__global__ void rotary_embedding_kernel(
    half* __restrict__ q_rot, half* __restrict__ k_rot, const half* __restrict__ q, const half* __restrict__ k,
    const half* __restrict__ cos_ptr, const half* __restrict__ sin_ptr,
    int seq_len, int batch_size, int num_heads, int num_kv, int hidden_size,
    int q_strides, int q_strideb, int q_strideh, int q_strided,
    int k_strides, int k_strideb, int k_stridekv, int k_strided,
    int seq_offset) {
  (void)q_strideb;
  (void)k_strideb;
  const int pid = blockIdx.x;
  const int num_bh_blocks = cdiv(batch_size * num_heads, BLOCK_SIZE_BH);
  const int num_d_blocks = cdiv(hidden_size / 2, BLOCK_SIZE_D);
  const int bh_id = pid % num_bh_blocks;
  const int d_id = pid / num_bh_blocks % num_d_blocks;
  const int seq_block_id = pid / num_bh_blocks / num_d_blocks;
  const int group = num_heads / num_kv;

  for (int t = threadIdx.x; t < BLOCK_SIZE_SEQ * BLOCK_SIZE_BH * BLOCK_SIZE_D; t += NUM_THREADS) {
    const int seq_off = seq_block_id * BLOCK_SIZE_SEQ + t / (BLOCK_SIZE_BH * BLOCK_SIZE_D);
    const int bh_off = bh_id * BLOCK_SIZE_BH + t / BLOCK_SIZE_D % BLOCK_SIZE_BH;
    const int hidden_off_l = d_id * BLOCK_SIZE_D + t % BLOCK_SIZE_D;
    const int hidden_off_r = hidden_size / 2 + hidden_off_l;
    if (seq_off >= seq_len || bh_off >= batch_size * num_heads || hidden_off_l >= hidden_size / 2) continue;

    const long long q_common = (long long)seq_off * q_strides + (long long)bh_off * q_strideh;
    const long long k_common = (long long)seq_off * k_strides + (long long)(bh_off / group) * k_stridekv;
    const half* c_base = cos_ptr + (long long)(seq_offset + seq_off) * hidden_size;
    const half* s_base = sin_ptr + (long long)(seq_offset + seq_off) * hidden_size;

    const half cos_l = c_base[hidden_off_l], cos_r = c_base[hidden_off_r];
    const half sin_l = s_base[hidden_off_l], sin_r = s_base[hidden_off_r];

    const half q_l = q[q_common + (long long)hidden_off_l * q_strided];
    const half q_r = q[q_common + (long long)hidden_off_r * q_strided];
    q_rot[q_common + (long long)hidden_off_l * q_strided] = __hsub(__hmul(q_l, cos_l), __hmul(q_r, sin_l));
    q_rot[q_common + (long long)hidden_off_r * q_strided] = __hadd(__hmul(q_r, cos_r), __hmul(q_l, sin_r));

    if (bh_off % group == 0) {  // one writer per KV head
      const half k_l = k[k_common + (long long)hidden_off_l * k_strided];
      const half k_r = k[k_common + (long long)hidden_off_r * k_strided];
      k_rot[k_common + (long long)hidden_off_l * k_strided] = __hsub(__hmul(k_l, cos_l), __hmul(k_r, sin_l));
      k_rot[k_common + (long long)hidden_off_r * k_strided] = __hadd(__hmul(k_r, cos_r), __hmul(k_l, sin_r));
    }
  }
}

// triton_rotary_embd_forward for contiguous q [S, B, H, D] and k [S, B, nKV, D]; offset = rows of the cos / sin
// tables already consumed (q and k hold the next seq_len positions).
void rotary_embd_forward(half* query_rot, half* key_rot, const half* q, const half* k, const half* cos_ptr,
                         const half* sin_ptr, int seq_len, int B, int H, int nKV, int D, int offset,
                         cudaStream_t stream) {
  const int grid = cdiv(seq_len, BLOCK_SIZE_SEQ) * cdiv(B * H, BLOCK_SIZE_BH) * cdiv(D / 2, BLOCK_SIZE_D);
  rotary_embedding_kernel<<<dim3(grid, 1, 1), dim3(NUM_THREADS), 0, stream>>>(
      query_rot, key_rot, q, k, cos_ptr, sin_ptr, seq_len, B, H, nKV, D,
      B * H * D, H * D, D, 1,
      B * nKV * D, nKV * D, D, 1,
      offset);
}
