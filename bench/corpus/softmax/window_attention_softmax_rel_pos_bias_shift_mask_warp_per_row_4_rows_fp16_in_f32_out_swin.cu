// Window-attention softmax in the style of microsoft/Swin-Transformer (models/swin_transformer.py,
// WindowAttention.forward: attn = q @ k^T, + relative_position_bias, + the shifted-window mask, self.softmax), the
// three PyTorch ops between the two matmuls written as one CUDA kernel, as they run under AMP:
//   attn [B_, nH, N, N] fp16 (the autocast q @ k^T; B_ = batch * nW windows, N = Wh * Ww = 49 tokens of a 7 x 7
//   window); relative_position_bias [nH, N, N] fp32 (the table gathered by relative_position_index and permuted,
//   a float32 parameter); mask [nW, N, N] fp32 (0 inside a shifted-window region, -100.0 across regions; None for
//   the non-shifted blocks); fp16 + fp32 promotes to fp32, and softmax is on autocast's fp32 list, so the output
//   is fp32 [B_, nH, N, N]: value = float(attn) + bias[h, i, j] + mask[w, i, j], w = (row's window) % nW
//   (attn.view(B_ // nW, nW, nH, N, N) + mask.unsqueeze(1).unsqueeze(0))
//   launch (ours): ONE WARP PER (window, head, query) ROW, 4 rows per block (block (32, 4), row from blockDim.y),
//   grid ceil(rows / 4); lanes stride the 49 keys; three passes re-reading global memory (max, sum of expf,
//   expf / sum), __shfl_xor_sync butterflies; int indices; stream argument
// No bug found. The mask input uses uniform(-100, 0) values instead of exact 0 / -100 regions (same arithmetic).
// Tolerance: probabilities over 49 keys; outputs compared with atol 1e-6.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>

constexpr int kWarpSize = 32;
constexpr int kRowsPerBlock = 4;

/* kerntune:
args  = ["attn: in f16[BW * nH * L * L]", "relative_position_bias: in f32[nH * L * L]",
         "mask: in f32[nW * L * L] ~ uniform(-100, 0)", "out: out f32[BW * nH * L * L]", "nW: i32 = nW",
         "num_heads: i32 = nH", "N: i32 = L", "rows: i32 = BW * nH * L"]
sizes = [{ BW = 4096, nW = 64, nH = 4, L = 49 }, { BW = 1, nW = 1, nH = 32, L = 49 },
         { BW = 12, nW = 4, nH = 16, L = 49 }]
grid  = "cdiv(BW * nH * L, 4)"
block = [32, 4]
atol  = 1e-6
*/
__global__ void window_attention_softmax_kernel(const __half* __restrict__ attn,
                                                const float* __restrict__ relative_position_bias,
                                                const float* __restrict__ mask, float* __restrict__ out, int nW,
                                                int num_heads, int N, int rows) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;  // (b_, h, i)
    if (row >= rows) return;
    const int lane = threadIdx.x;

    const int i = row % N;
    const int h = (row / N) % num_heads;
    const int w = (row / N / num_heads) % nW;

    const __half* a = attn + (size_t)row * N;
    const float* bias = relative_position_bias + ((size_t)h * N + i) * N;
    const float* m = mask + ((size_t)w * N + i) * N;
    float* o = out + (size_t)row * N;

    float max_val = -FLT_MAX;
    for (int j = lane; j < N; j += kWarpSize) {
        max_val = fmaxf(max_val, __half2float(a[j]) + bias[j] + m[j]);
    }
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
        max_val = fmaxf(max_val, __shfl_xor_sync(0xffffffff, max_val, offset));
    }

    float sum = 0.f;
    for (int j = lane; j < N; j += kWarpSize) {
        sum += expf(__half2float(a[j]) + bias[j] + m[j] - max_val);
    }
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
        sum += __shfl_xor_sync(0xffffffff, sum, offset);
    }

    for (int j = lane; j < N; j += kWarpSize) {
        o[j] = expf(__half2float(a[j]) + bias[j] + m[j] - max_val) / sum;
    }
}

// attn: device [B_, num_heads, N, N] fp16; relative_position_bias: [num_heads, N, N] fp32; mask: [nW, N, N] fp32;
// out: [B_, num_heads, N, N] fp32. B_ = batch * nW.
void window_attention_softmax(const __half* attn, const float* relative_position_bias, const float* mask, float* out,
                              int B_, int nW, int num_heads, int N, cudaStream_t stream) {
    const int rows = B_ * num_heads * N;
    const dim3 block(kWarpSize, kRowsPerBlock);
    const dim3 grid((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    window_attention_softmax_kernel<<<grid, block, 0, stream>>>(attn, relative_position_bias, mask, out, nW,
                                                                num_heads, N, rows);
}
