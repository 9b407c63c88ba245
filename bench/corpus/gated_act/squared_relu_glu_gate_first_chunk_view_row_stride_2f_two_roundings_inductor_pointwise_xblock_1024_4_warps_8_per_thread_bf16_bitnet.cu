// The feed-forward activation of BitNet b1.58 (microsoft/BitNet, gpu/model.py, FeedForward.forward):
//     x13 = self.w13(x)                      # [tokens, 2 * ffn_dim] bf16, gate and up projections side by side
//     x1, x3 = x13.chunk(2, -1)              # two VIEWS, rows 2 * ffn_dim apart: gate x1 first, up x3 second
//     inner = squared_relu(x1) * x3          # squared_relu = F.relu(x) ** 2 under @torch.compile
// i.e. a ReLU^2 gated linear unit (ReGLU with a squared ReLU), not SiLU or GELU. In the model the two steps are two
// kernels: the compiled squared_relu is one Inductor pointwise kernel over the strided gate view (loads upcast to
// fp32, relu and square in fp32, ONE rounding to bf16 at its store), and the multiply is PyTorch's eager bf16 mul
// (both operands upcast, product in fp32, rounded to bf16 again). This file writes the two as one CUDA kernel that
// keeps both roundings:  r = bf16(max(g, 0)^2),  out = bf16(float(r) * float(u)).
// The launch follows Inductor's pointwise schedule for a 1-D kernel of this size: XBLOCK = 1024 elements per
// program, num_warps = 4 (128 threads), each thread 8 CONSECUTIVE output elements (Triton's blocked layout for
// 16-bit values), flat int32 xindex decomposed into x0 = xindex % ks0 (column) and x1 = xindex / ks0 (token), the
// gate read at x0 + 2 * ks0 * x1 and the up value ks0 further, the output contiguous; Inductor's tmpN naming and
// in_ptr / out_ptr / ks0 / xnumel argument names are kept. ks0 (ffn_dim) is an argument, as Inductor emits it for a
// dynamic size. No bug found.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

constexpr int XBLOCK = 1024;                                // elements per program
constexpr int kNumWarps = 4;                                // Inductor's num_warps for this pointwise kernel
constexpr int kElemsPerThread = XBLOCK / (kNumWarps * 32);  // 8 contiguous bf16 = 16 bytes per thread

/* kerntune:
args  = ["in_ptr0: in bf16[tokens * 2 * ffn_dim]", "out_ptr0: out bf16[tokens * ffn_dim]", "ks0: i32 = ffn_dim",
         "xnumel: i32 = tokens * ffn_dim"]
sizes = [{ tokens = 8192, ffn_dim = 6912 }, { tokens = 4, ffn_dim = 6912 }, { tokens = 999, ffn_dim = 3001 }]
grid  = "cdiv(tokens * ffn_dim, 1024)"
block = 128
*/
__global__ void __launch_bounds__(128)
    squared_relu_mul_kernel(const __nv_bfloat16* __restrict__ in_ptr0, __nv_bfloat16* __restrict__ out_ptr0,
                            int ks0, int xnumel) {
  const int xoffset = blockIdx.x * XBLOCK;
  const int xbase = xoffset + threadIdx.x * kElemsPerThread;
#pragma unroll
  for (int i = 0; i < kElemsPerThread; ++i) {
    const int xindex = xbase + i;
    if (xindex < xnumel) {  // xmask
      const int x0 = xindex % ks0;
      const int x1 = xindex / ks0;
      // squared_relu(x1): tmp0 = load gate, tmp2 = maximum(0, tmp0), tmp3 = tmp2 * tmp2, stored as bf16
      const float tmp0 = __bfloat162float(in_ptr0[x0 + 2 * ks0 * x1]);
      const float tmp2 = fmaxf(tmp0, 0.0f);
      const __nv_bfloat16 tmp3 = __float2bfloat16(tmp2 * tmp2);
      // * x3: the up half, ks0 columns further in the same row, multiplied in fp32 and rounded again
      const float tmp4 = __bfloat162float(in_ptr0[ks0 + x0 + 2 * ks0 * x1]);
      out_ptr0[xindex] = __float2bfloat16(__bfloat162float(tmp3) * tmp4);
    }
  }
}

// x13: [tokens, 2 * ffn_dim] bf16, the w13 projection (gate x1 in columns [0, ffn_dim), up x3 in
// [ffn_dim, 2 * ffn_dim)); inner: [tokens, ffn_dim] bf16, contiguous. Device pointers.
void bitnet_ffn_squared_relu_mul(const __nv_bfloat16* x13, __nv_bfloat16* inner, int tokens, int ffn_dim,
                                 cudaStream_t stream) {
  const int xnumel = tokens * ffn_dim;
  if (xnumel == 0) return;
  const int grid = (xnumel + XBLOCK - 1) / XBLOCK;  // triton.cdiv(xnumel, XBLOCK)
  squared_relu_mul_kernel<<<grid, kNumWarps * 32, 0, stream>>>(x13, inner, ffn_dim, xnumel);
}
