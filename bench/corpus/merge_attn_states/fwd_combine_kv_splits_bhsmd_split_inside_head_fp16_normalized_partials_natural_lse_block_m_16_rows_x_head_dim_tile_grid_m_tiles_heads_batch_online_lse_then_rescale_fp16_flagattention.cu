// The split-KV combine of FlagAttention's flash decoding (FlagOpen/FlagAttention, src/flag_attn/split_kv.py:
// _fwd_combine_kv_splits, launched by attention() after _fwd_split_kv_kernel when the split heuristic picks S > 1;
// FlagAttention is BAAI's library of Triton attention kernels), written as the CUDA port of that Triton program:
//   multiple_o [B, H, S, M, D] fp16: each split's output, already divided by the split's own softmax sum and
//   stored in the input dtype; the split index sits INSIDE the head, before the query rows (o's shape is
//   (B, H, S, M, D)), addressed through five strides; multiple_l [B, H, S, M] fp32: each split's natural-log
//   normalizer m * sm_scale + log(l) (contiguous, indexed from B, H, S, M); final_o [B, H, M, D] fp16 (like q)
//   through four strides, final_l [B, H, M] fp32. M is the number of queries per sequence (1 when decoding).
//   One program per (BLOCK_M = 16 query rows, head, batch): grid (cdiv(M, 16), H, B), num_warps 4 (128 threads),
//   BLOCK_DMODEL = D (16, 32, 64 or 128; a template argument), DIVISIBLE_M (M % 16 == 0) a template argument too.
//   1st loop, online logsumexp over the splits for the 16 rows: m_new = max(m, l), acc = acc * exp(m - m_new) +
//   exp(l - m_new), l_acc = m + log(acc); 2nd loop, for every split, the [16, D] tile of o is scaled by
//   exp(l - l_acc) (l read again) and accumulated in fp32 registers; o_acc is rounded to fp16 once at the store
//   and l_acc stored as final_l. The port gives the first loop to threads 0..15 (one row each, l_acc through
//   shared memory) and spreads the [16, D] tile over the 128 threads, element e of thread t at row
//   (e * 128 + t) / D, column (e * 128 + t) % D; offsets are int32 products as Triton computes them.
// Fixed: a split that saw no key for a row (a causal split past the row, or a fully masked row) has l = -inf and
// a NaN o (0 * (1 / 0) in _fwd_split_kv_kernel); the combine multiplied that NaN by its zero weight exp(-inf), so
// one empty split turned the row into NaN. Such splits are skipped here, and a row whose every split is empty gets
// o = 0 and l = -inf, as flash.py writes its empty rows. Changed: the Python launch became a launcher with device
// pointers, sizes and a stream (S == 1 launches nothing: attention() returns the single split as it is).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <math_constants.h>

namespace flag_attn {

constexpr int kNumWarps = 4;
constexpr int kThreads = kNumWarps * 32;

/* kerntune:
args  = ["multiple_o: in f16[batch * heads * splits * m_q * 128]",
         "multiple_l: in f32[batch * heads * splits * m_q] ~ uniform(-4, 12)",
         "final_o: out f16[batch * heads * m_q * 128]", "final_l: out f32[batch * heads * m_q]",
         "stride_mul_oz: i32 = heads * splits * m_q * 128", "stride_mul_oh: i32 = splits * m_q * 128",
         "stride_mul_os: i32 = m_q * 128", "stride_mul_om: i32 = 128", "stride_mul_ok: i32 = 1",
         "stride_fin_oz: i32 = heads * m_q * 128", "stride_fin_oh: i32 = m_q * 128", "stride_fin_om: i32 = 128",
         "stride_fin_ok: i32 = 1", "Z: i32 = batch", "H: i32 = heads", "M: i32 = m_q", "S: i32 = splits"]
sizes = [{ batch = 16, heads = 32, splits = 8, m_q = 72 }, { batch = 4, heads = 32, splits = 16, m_q = 1 },
         { batch = 3, heads = 13, splits = 5, m_q = 37 }]
grid  = ["cdiv(m_q, 16)", "heads", "batch"]
block = 128
template_args = ["16", "128", "false"]
*/
template <int BLOCK_M, int BLOCK_DMODEL, bool DIVISIBLE_M>
__global__ void __launch_bounds__(kThreads)
    _fwd_combine_kv_splits(const half* multiple_o, const float* multiple_l, half* final_o, float* final_l,
                           int stride_mul_oz, int stride_mul_oh, int stride_mul_os, int stride_mul_om,
                           int stride_mul_ok, int stride_fin_oz, int stride_fin_oh, int stride_fin_om,
                           int stride_fin_ok, int Z, int H, int M, int S) {
  constexpr int kPerThread = BLOCK_M * BLOCK_DMODEL / kThreads;
  static_assert(kPerThread * kThreads == BLOCK_M * BLOCK_DMODEL, "the tile must cover whole threads");
  __shared__ float l_acc_rows[BLOCK_M];

  const int start_m = blockIdx.x;
  const int offs_h = blockIdx.y;
  const int offs_z = blockIdx.z;

  // offset
  multiple_o += offs_z * stride_mul_oz + offs_h * stride_mul_oh;  // (B, H, S, M, D)
  multiple_l += (offs_z * H + offs_h) * S * M;                     // (B, H, S, M)

  // 1st loop: online logsumexp to save a sweep
  if (threadIdx.x < BLOCK_M) {
    const int offs_m = start_m * BLOCK_M + threadIdx.x;
    float m = -CUDART_INF_F;
    float acc = 0.0f;
    if (DIVISIBLE_M || offs_m < M) {
      const float* l_ptrs = multiple_l + offs_m;
      for (int s = 0; s < S; ++s) {
        const float l = *l_ptrs;
        if (l != -CUDART_INF_F) {  // an empty split adds nothing
          const float m_new = fmaxf(m, l);
          acc = acc * expf(m - m_new) + expf(l - m_new);
          m = m_new;
        }
        l_ptrs += M;
      }
    }
    l_acc_rows[threadIdx.x] = m + logf(acc);  // -inf when every split was empty
  }
  __syncthreads();

  // 2nd loop to rescale and accumulate o
  float o_acc[kPerThread];
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) o_acc[e] = 0.0f;
  for (int s = 0; s < S; ++s) {
    const float* l_ptrs = multiple_l + s * M;
    const half* o_ptrs = multiple_o + s * stride_mul_os;
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const int idx = e * kThreads + threadIdx.x;
      const int row = idx / BLOCK_DMODEL;
      const int offs_k = idx % BLOCK_DMODEL;
      const int offs_m = start_m * BLOCK_M + row;
      if (DIVISIBLE_M || offs_m < M) {
        const float l = l_ptrs[offs_m];
        if (l != -CUDART_INF_F) {
          const float rescale = expf(l - l_acc_rows[row]);
          const float o = __half2float(o_ptrs[offs_m * stride_mul_om + offs_k * stride_mul_ok]);
          o_acc[e] += o * rescale;
        }
      }
    }
  }

  // write back
  final_o += offs_z * stride_fin_oz + offs_h * stride_fin_oh;
  final_l += (offs_z * H + offs_h) * M;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int idx = e * kThreads + threadIdx.x;
    const int row = idx / BLOCK_DMODEL;
    const int offs_k = idx % BLOCK_DMODEL;
    const int offs_m = start_m * BLOCK_M + row;
    if (DIVISIBLE_M || offs_m < M) final_o[offs_m * stride_fin_om + offs_k * stride_fin_ok] = __float2half(o_acc[e]);
  }
  if (threadIdx.x < BLOCK_M) {
    const int offs_m = start_m * BLOCK_M + threadIdx.x;
    if (DIVISIBLE_M || offs_m < M) final_l[offs_m] = l_acc_rows[threadIdx.x];
  }
}

template <int BLOCK_DMODEL>
static void launch_combine(const half* multiple_o, const float* multiple_l, half* final_o, float* final_l, int B,
                           int H, int M, int S, cudaStream_t stream) {
  constexpr int BLOCK_M = 16;  // get_fwd_config: (BLOCK_M, BLOCK_N, num_stages, num_warps) = (16, 128, 1, 4)
  const int D = BLOCK_DMODEL;
  // contiguous multiple_o (B, H, S, M, D) and final_o (B, H, M, D), as attention() allocates them
  const int stride_mul_ok = 1, stride_mul_om = D, stride_mul_os = M * D, stride_mul_oh = S * M * D,
            stride_mul_oz = H * S * M * D;
  const int stride_fin_ok = 1, stride_fin_om = D, stride_fin_oh = M * D, stride_fin_oz = H * M * D;
  const bool divisible_m = M % BLOCK_M == 0;
  const dim3 grid((M + BLOCK_M - 1) / BLOCK_M, H, B);  // (triton.cdiv(M, BLOCK_M), H, B)
  if (divisible_m) {
    _fwd_combine_kv_splits<BLOCK_M, BLOCK_DMODEL, true><<<grid, kThreads, 0, stream>>>(
        multiple_o, multiple_l, final_o, final_l, stride_mul_oz, stride_mul_oh, stride_mul_os, stride_mul_om,
        stride_mul_ok, stride_fin_oz, stride_fin_oh, stride_fin_om, stride_fin_ok, B, H, M, S);
  } else {
    _fwd_combine_kv_splits<BLOCK_M, BLOCK_DMODEL, false><<<grid, kThreads, 0, stream>>>(
        multiple_o, multiple_l, final_o, final_l, stride_mul_oz, stride_mul_oh, stride_mul_os, stride_mul_om,
        stride_mul_ok, stride_fin_oz, stride_fin_oh, stride_fin_om, stride_fin_ok, B, H, M, S);
  }
}

}  // namespace flag_attn

// multiple_o: [B, H, S, M, D] fp16 (normalized per split); multiple_l: [B, H, S, M] fp32 (natural-log lse per
// split); final_o: [B, H, M, D] fp16; final_l: [B, H, M] fp32. D in {16, 32, 64, 128}. Device pointers.
void combine_kv_splits(const half* multiple_o, const float* multiple_l, half* final_o, float* final_l, int B, int H,
                       int M, int D, int S, cudaStream_t stream) {
  if (B == 0 || H == 0 || M == 0 || S <= 1) return;  // S == 1: the caller uses multiple_o.squeeze(2)
  switch (D) {
    case 16: flag_attn::launch_combine<16>(multiple_o, multiple_l, final_o, final_l, B, H, M, S, stream); break;
    case 32: flag_attn::launch_combine<32>(multiple_o, multiple_l, final_o, final_l, B, H, M, S, stream); break;
    case 64: flag_attn::launch_combine<64>(multiple_o, multiple_l, final_o, final_l, B, H, M, S, stream); break;
    case 128: flag_attn::launch_combine<128>(multiple_o, multiple_l, final_o, final_l, B, H, M, S, stream); break;
    default: break;  // FlagAttention asserts Dk in {16, 32, 64, 128}
  }
}
