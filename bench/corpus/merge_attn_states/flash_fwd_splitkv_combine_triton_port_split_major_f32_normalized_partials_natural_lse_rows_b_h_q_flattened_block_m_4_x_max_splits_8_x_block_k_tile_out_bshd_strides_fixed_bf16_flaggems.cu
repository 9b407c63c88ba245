// Split-KV combine of flash attention in the style of FlagGems (FlagOpen/FlagGems, src/flag_gems/ops/flash_kernel.py:
// flash_fwd_splitkv_combine_kernel, launched by mha_fwd's dispatch() in src/flag_gems/ops/flash_api.py after
// flash_fwd_splitkv_kernel when its splits heuristic picks n_splits > 1; FlagGems is BAAI's library of Triton
// operators that replace PyTorch ATen kernels, flash_attn_func included), written as the CUDA port of that program:
//   out_splits [n_splits, B, H, Q, D] fp32: each split's output ALREADY NORMALIZED by its own row sum (acc / l, 0 for
//   an empty split), SPLIT-MAJOR, the rows (b, h, q) flattened in that order; lse_splits [n_splits, B, H, Q] fp32
//   natural-log (m * softmax_scale + log(l); -inf for an empty split); out [B, Q, H, D] in q's dtype (bf16) and
//   layout (BSHD), lse [B, H, Q] fp32. Argument order as FlagGems: (out, lse, out_splits, lse_splits, head_size,
//   out_split_stride, lse_split_stride, out_b_stride, out_s_stride, out_h_stride, n_splits, BLOCK_M, BLOCK_K,
//   q_total, MAX_N_SPLITS); the constexprs head_size, BLOCK_M, BLOCK_K = next_power_of_2(D) and MAX_N_SPLITS =
//   next_power_of_2(n_splits) are template arguments (spec: <bf16, 128, 4, 128, 8>).
//   One program per BLOCK_M flattened rows (BLOCK_M = 4 for D >= 128, 8 for D >= 64, else 16): grid
//   cdiv(B * H * Q, BLOCK_M), num_warps 4 (Triton's default: 128 threads). The [BLOCK_M, MAX_N_SPLITS] lse tile
//   (masked splits and rows as -inf) gives max_lse, Zi = exp(lse - max_lse), Z = sum(Zi), the weights Zi / Z and the
//   merged lse = log(Z) + max_lse; then the [BLOCK_M, MAX_N_SPLITS, BLOCK_K] tile of partial outputs (masked as 0)
//   is summed over the splits with those weights, in fp32, and rounded once to the output dtype. In the port threads
//   0..BLOCK_M-1 compute a row's weights into shared memory (one row each) and write its lse; the BLOCK_M x BLOCK_K
//   outputs are spread over the 128 threads (element e of thread t at row (e * 128 + t) / BLOCK_K, column
//   (e * 128 + t) % BLOCK_K), each looping over the splits; exp is Triton's fp32 exp (__expf), int32 offsets as
//   Triton computes them.
// Fixed: FlagGems writes row r of a program at out + pid * BLOCK_M * head_size + (r - pid * BLOCK_M) * out_s_stride,
// i.e. as if the (b, h, q) rows were head_size apart; that holds only when out is laid out head-major (q passed as a
// [B, H, Q, D] tensor transposed to BSHD, or the GQA decode view seqlenq_ngroups_swapped builds), and for an ordinary
// contiguous [B, Q, H, D] output with H > 1 the merged rows land at the wrong places (and past the end of out);
// out_b_stride was passed but unused and out_h_stride was given out.stride(-1). The row is split into (b, h, q) here
// (num_heads and seqlen_q added as the last two arguments) and written at b * out_b_stride + q * out_s_stride +
// h * out_h_stride, with out_h_stride = out.stride(-2). Changed: the Python dispatch became a C++ launcher with device
// pointers, sizes, strides and a stream; the split count is the caller's (the sizes below are not what FlagGems'
// splits heuristic would pick: its combine never moves 64 MiB).
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace flag_gems {

constexpr int kNumWarps = 4;  // the combine is launched without num_warps: Triton's default
constexpr int kThreads = kNumWarps * 32;

__device__ __forceinline__ void store_as(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void store_as(__half* p, float v) { *p = __float2half(v); }

/* kerntune:
args  = ["out_ptr: out bf16[B * Q * H * 128]", "lse_ptr: out f32[B * H * Q]",
         "out_splits_ptr: in f32[S * B * H * Q * 128]", "lse_splits_ptr: in f32[S * B * H * Q] ~ uniform(-4, 12)",
         "out_split_stride: i32 = B * H * Q * 128", "lse_split_stride: i32 = B * H * Q",
         "out_b_stride: i32 = Q * H * 128", "out_s_stride: i32 = H * 128", "out_h_stride: i32 = 128",
         "n_splits: i32 = S", "q_total: i32 = B * H * Q", "num_heads: i32 = H", "seqlen_q: i32 = Q"]
sizes = [{ B = 2, H = 32, Q = 256, S = 8 }, { B = 4, H = 32, Q = 1, S = 8 }, { B = 3, H = 13, Q = 37, S = 5 }]
grid  = "cdiv(B * H * Q, 4)"
block = 128
template_args = ["__nv_bfloat16", "128", "4", "128", "8"]
*/
template <typename T, int HEAD_SIZE, int BLOCK_M, int BLOCK_K, int MAX_N_SPLITS>
__global__ void __launch_bounds__(kThreads)
    flash_fwd_splitkv_combine_kernel(T* out_ptr, float* lse_ptr, const float* out_splits_ptr,
                                     const float* lse_splits_ptr, int out_split_stride, int lse_split_stride,
                                     int out_b_stride, int out_s_stride, int out_h_stride, int n_splits, int q_total,
                                     int num_heads, int seqlen_q) {
  constexpr int PER = BLOCK_M * BLOCK_K / kThreads;
  static_assert(PER * kThreads == BLOCK_M * BLOCK_K, "the tile must cover whole threads");
  static_assert(BLOCK_M <= kThreads, "one thread per row for the lse tile");
  __shared__ float Zi_Z[BLOCK_M][MAX_N_SPLITS];

  const int pid = blockIdx.x;
  lse_splits_ptr += pid * BLOCK_M;
  lse_ptr += pid * BLOCK_M;
  out_splits_ptr += pid * BLOCK_M * HEAD_SIZE;

  // Subtracting maximum from each of the split lse's for better numerical stability
  if (threadIdx.x < BLOCK_M) {
    const int m = threadIdx.x;
    const bool row_ok = pid * BLOCK_M + m < q_total;
    float lse_splits[MAX_N_SPLITS];
    float max_lse = -INFINITY;
#pragma unroll
    for (int s = 0; s < MAX_N_SPLITS; ++s) {
      lse_splits[s] = (row_ok && s < n_splits) ? lse_splits_ptr[m + s * lse_split_stride] : -INFINITY;
      max_lse = fmaxf(max_lse, lse_splits[s]);
    }
    // Sum exp(lse(i) - max_lse) over all split i to obtain Z = sumexp(QK) up to a scaled factor exp(-max_lse)
    float Z_scaled = 0.0f;
#pragma unroll
    for (int s = 0; s < MAX_N_SPLITS; ++s) {
      lse_splits[s] = __expf(lse_splits[s] - max_lse);  // Zi_scaled
      Z_scaled += lse_splits[s];
    }
#pragma unroll
    for (int s = 0; s < MAX_N_SPLITS; ++s) Zi_Z[m][s] = lse_splits[s] / Z_scaled;
    // Write back LSE
    if (row_ok) lse_ptr[m] = logf(Z_scaled) + max_lse;
  }
  __syncthreads();

#pragma unroll
  for (int e = 0; e < PER; ++e) {
    const int idx = e * kThreads + threadIdx.x;
    const int m = idx / BLOCK_K;
    const int k = idx % BLOCK_K;
    const int row = pid * BLOCK_M + m;
    if (row >= q_total || k >= HEAD_SIZE) continue;
    float acc = 0.0f;
#pragma unroll
    for (int s = 0; s < MAX_N_SPLITS; ++s) {
      const float o = s < n_splits ? out_splits_ptr[m * HEAD_SIZE + s * out_split_stride + k] : 0.0f;
      acc += Zi_Z[m][s] * o;
    }
    // Write back output: fixed, the row's (b, h, q) through the output strides
    const int q = row % seqlen_q;
    const int h = (row / seqlen_q) % num_heads;
    const int b = row / (seqlen_q * num_heads);
    store_as(out_ptr + b * out_b_stride + q * out_s_stride + h * out_h_stride + k, acc);
  }
}

template <typename T, int HEAD_SIZE, int BLOCK_M, int MAX_N_SPLITS>
static void launch_combine(T* out, float* lse, const float* out_splits, const float* lse_splits, int B, int H, int Q,
                           int n_splits, int out_b_stride, int out_s_stride, int out_h_stride, cudaStream_t stream) {
  constexpr int BLOCK_K = HEAD_SIZE <= 64 ? 64 : (HEAD_SIZE <= 128 ? 128 : 256);  // triton.next_power_of_2(D)
  const int q_total = B * H * Q;
  const int out_split_stride = B * H * Q * HEAD_SIZE;  // out_splits.stride(0)
  const int lse_split_stride = B * H * Q;              // lse_splits.stride(0)
  const int grid = (q_total + BLOCK_M - 1) / BLOCK_M;  // triton.cdiv(B * H * Q, BLOCK_M)
  flash_fwd_splitkv_combine_kernel<T, HEAD_SIZE, BLOCK_M, BLOCK_K, MAX_N_SPLITS><<<grid, kThreads, 0, stream>>>(
      out, lse, out_splits, lse_splits, out_split_stride, lse_split_stride, out_b_stride, out_s_stride, out_h_stride,
      n_splits, q_total, H, Q);
}

template <typename T, int HEAD_SIZE, int BLOCK_M>
static void dispatch_splits(T* out, float* lse, const float* out_splits, const float* lse_splits, int B, int H, int Q,
                            int n_splits, int out_b_stride, int out_s_stride, int out_h_stride,
                            cudaStream_t stream) {
  int max_n_splits = 1;  // triton.next_power_of_2(n_splits)
  while (max_n_splits < n_splits) max_n_splits *= 2;
  switch (max_n_splits) {
    case 2:
      launch_combine<T, HEAD_SIZE, BLOCK_M, 2>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                               out_s_stride, out_h_stride, stream);
      break;
    case 4:
      launch_combine<T, HEAD_SIZE, BLOCK_M, 4>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                               out_s_stride, out_h_stride, stream);
      break;
    case 8:
      launch_combine<T, HEAD_SIZE, BLOCK_M, 8>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                               out_s_stride, out_h_stride, stream);
      break;
    case 16:
      launch_combine<T, HEAD_SIZE, BLOCK_M, 16>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                                out_s_stride, out_h_stride, stream);
      break;
    case 32:
      launch_combine<T, HEAD_SIZE, BLOCK_M, 32>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                                out_s_stride, out_h_stride, stream);
      break;
    case 64:
      launch_combine<T, HEAD_SIZE, BLOCK_M, 64>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                                out_s_stride, out_h_stride, stream);
      break;
    case 128:
      launch_combine<T, HEAD_SIZE, BLOCK_M, 128>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                                 out_s_stride, out_h_stride, stream);
      break;
    case 256:
      launch_combine<T, HEAD_SIZE, BLOCK_M, 256>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                                 out_s_stride, out_h_stride, stream);
      break;
    default:
      assert(false && "n_splits out of range");
  }
}

}  // namespace flag_gems

// out: device [B, Q, H, D] (q's layout; strides in elements, out_h_stride = out.stride(-2)); lse: [B, H, Q] fp32;
// out_splits: [n_splits, B, H, Q, D] fp32; lse_splits: [n_splits, B, H, Q] fp32. D in {64, 128, 192}; 2 <= n_splits
// <= 256 (the splits heuristic caps it at the SM count).
template <typename T>
void flash_fwd_splitkv_combine(T* out, float* lse, const float* out_splits, const float* lse_splits, int B, int H,
                               int Q, int D, int n_splits, int out_b_stride, int out_s_stride, int out_h_stride,
                               cudaStream_t stream) {
  if (B == 0 || H == 0 || Q == 0 || n_splits <= 1) return;  // n_splits == 1: flash_fwd writes out directly
  switch (D) {  // BLOCK_M = 4 if D >= 128 else 8 if D >= 64 else 16
    case 64:
      flag_gems::dispatch_splits<T, 64, 8>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                           out_s_stride, out_h_stride, stream);
      break;
    case 128:
      flag_gems::dispatch_splits<T, 128, 4>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                            out_s_stride, out_h_stride, stream);
      break;
    case 192:
      flag_gems::dispatch_splits<T, 192, 4>(out, lse, out_splits, lse_splits, B, H, Q, n_splits, out_b_stride,
                                            out_s_stride, out_h_stride, stream);
      break;
    default:
      assert(false && "head size not compiled in");
  }
}

template void flash_fwd_splitkv_combine<__nv_bfloat16>(__nv_bfloat16*, float*, const float*, const float*, int, int,
                                                       int, int, int, int, int, int, cudaStream_t);
template void flash_fwd_splitkv_combine<__half>(__half*, float*, const float*, const float*, int, int, int, int, int,
                                                int, int, int, cudaStream_t);
