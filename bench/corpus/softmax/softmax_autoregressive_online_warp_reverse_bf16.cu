// Causal attention softmax as Karpathy's llm.c writes it (llmc/attention.cuh, softmax_forward_kernel5, used by
// its non-cuDNN attention between the two batched matmuls): inp / out are the (N, T, T) pre-attention scores
// and probabilities of N = B * NH heads, and row (n, t) only has the causal entries 0..t:
//   out[n, t, i] = floatX(expf(inv_temperature * (x_i - max)) / sum_{j <= t} expf(inv_temperature * (x_j - max)))
//   for i <= t, with max = max_{j <= t} x_j; the entries i > t are NOT written (they keep what the buffer held)
// The attention scale 1 / sqrt(head_size) is fused as inv_temperature inside the exponent (the max is taken on
// the raw scores). One warp per row, block_size 256 = 8 rows per block, grid CEIL_DIV(N * T * 32, 256);
// blocks walk the rows BACKWARDS ((gridDim.x - blockIdx.x - 1) * num_warps + warp_id) so that the rows near the
// top-left stay in cache for the following matmul. Online softmax per lane over chunks of 4 scores (the row
// start taken as 16-byte aligned by __builtin_assume_aligned, so T % 8 == 0 for bf16), the last partial chunk
// one score per lane, max then rescaled sum merged by xor-shuffle warp reductions, -FLT_MAX (not -inf) as the
// start, then a second read of the row recomputing each exponential and writing it times 1 / sum with the
// streaming hints __ldcs / __stcs. floatX = bf16.
// The output is declared inout: the upper triangle is left as it was. Probabilities are ~1 / t, far below the
// default absolute tolerance, hence a small atol.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cassert>

typedef __nv_bfloat16 floatX;

#define WARP_SIZE 32U
#define CEIL_DIV(M, N) (((M) + (N)-1) / (N))

__device__ inline float warpReduceSum(float val) {
  for (int offset = 16; offset > 0; offset /= 2) {
    val += __shfl_xor_sync(0xFFFFFFFF, val, offset);
  }
  return val;
}

__device__ inline float warpReduceMax(float val) {
  for (int offset = 16; offset > 0; offset /= 2) {
    val = fmaxf(val, __shfl_xor_sync(0xFFFFFFFF, val, offset));
  }
  return val;
}

/* kerntune:
args  = ["out: inout bf16[B * NH * T * T]", "inv_temperature: f32 = 0.125", "inp: in bf16[B * NH * T * T]",
         "N: i32 = B * NH", "T: i32 = T"]
sizes = [{ B = 4, NH = 12, T = 1024 }, { B = 1, NH = 2, T = 32 }, { B = 3, NH = 5, T = 104 }]
grid  = "cdiv(B * NH * T * 32, 256)"
block = 256
atol  = 1e-6
*/
__global__ void softmax_forward_kernel5(floatX* out, float inv_temperature, const floatX* inp, int N, int T) {
  // inp, out shape: (N, T, T), N = B * NH; lower triangle only
  assert(T % 4 == 0);  // (T % 8 == 0 for the 16-byte row alignment assumed below)
  int lane_id = threadIdx.x % WARP_SIZE;
  int warp_id = threadIdx.x / WARP_SIZE;
  int num_warps = blockDim.x / WARP_SIZE;

  // backward order over the rows
  int idx = (gridDim.x - blockIdx.x - 1) * num_warps + warp_id;
  if (idx >= N * T) {
    return;  // a whole warp leaves: the shuffles below stay full-warp
  }
  int own_pos = idx % T;
  int pos_by_4 = own_pos / 4;

  // one row of inp, i.e. inp[idx, :] of shape (T,)
  const floatX* x = inp + idx * T;

  // not INF, so that subtracting two starting values gives no NaN
  const float flt_max = 340282346638528859811704183484516925440.0f;
  float maxval = -flt_max;
  float sumval = 0.0f;

  const floatX* x_aligned = reinterpret_cast<const floatX*>(__builtin_assume_aligned(x, 16));
  for (int i = lane_id; i < pos_by_4; i += WARP_SIZE) {
    float regarray[4];
    for (int k = 0; k < 4; ++k) {
      regarray[k] = (float)x_aligned[4 * i + k];
    }
    float old_maxval = maxval;
    for (int k = 0; k < 4; ++k) {
      maxval = fmaxf(maxval, regarray[k]);
    }
    sumval *= expf(inv_temperature * (old_maxval - maxval));
    for (int k = 0; k < 4; ++k) {
      sumval += expf(inv_temperature * (regarray[k] - maxval));
    }
  }

  // the scores 4 * pos_by_4 .. own_pos: one per lane
  if (4 * pos_by_4 + lane_id <= own_pos) {
    float old_maxval = maxval;
    maxval = fmaxf(maxval, (float)x[4 * pos_by_4 + lane_id]);
    sumval *= expf(inv_temperature * (old_maxval - maxval));
    sumval += expf(inv_temperature * ((float)x[4 * pos_by_4 + lane_id] - maxval));
  }

  float global_maxval = warpReduceMax(maxval);
  sumval *= expf(inv_temperature * (maxval - global_maxval));

  float sum = warpReduceSum(sumval);
  float norm = 1.f / sum;

  // divide the whole row by the sum, recomputing the exponentials
  for (int i = lane_id; i <= own_pos; i += WARP_SIZE) {
    float ev = expf(inv_temperature * ((float)__ldcs(x + i) - global_maxval));
    __stcs(out + idx * T + i, (floatX)(ev * norm));
  }
}

// att (B, NH, T, T) from preatt (B, NH, T, T), scale = 1 / sqrt(head_size); device pointers, T % 8 == 0.
void attention_softmax_forward(floatX* att, const floatX* preatt, int B, int NH, int T, int HS, cudaStream_t stream) {
  const int softmax_block_size = 256;
  const float scale = 1.f / sqrtf(HS);
  int grid_size = CEIL_DIV(B * NH * T * WARP_SIZE, softmax_block_size);
  softmax_forward_kernel5<<<grid_size, softmax_block_size, 0, stream>>>(att, scale, preatt, B * NH, T);
}
