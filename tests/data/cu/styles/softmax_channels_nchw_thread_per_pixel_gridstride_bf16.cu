// Style kernel: softmax over the channels of an NCHW tensor (dim=1), bf16 in and out, the math in fp32: one thread
// per pixel (n, s) of a flat grid-stride walk over N * H * W pixels, three passes over the C channels HW elements
// apart (max, sum of expf, the normalized values), the index (n * C + c) * HW + s written out.
#include <cuda_bf16.h>

/* kerntune:
args  = ["y: out bf16[N * C * H * W]", "x: in bf16[N * C * H * W]", "N: i32 = N", "C: i32 = C", "HW: i32 = H * W"]
sizes = [{ N = 8, C = 64, H = 128, W = 128 }, { N = 1, C = 19, H = 16, W = 16 }, { N = 3, C = 21, H = 37, W = 53 }]
grid  = "min(cdiv(N * H * W, 256), 4096)"
block = 256
*/
__global__ void channel_softmax_nchw(__nv_bfloat16* y, const __nv_bfloat16* x, int N, int C, int HW) {
  const long long pixels = (long long)N * HW;
  for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < pixels; p += (long long)gridDim.x * blockDim.x) {
    const long long n = p / HW, s = p % HW;
    float m = -INFINITY;
    for (int c = 0; c < C; ++c) m = fmaxf(m, __bfloat162float(x[(n * C + c) * HW + s]));
    float sum = 0.f;
    for (int c = 0; c < C; ++c) sum += expf(__bfloat162float(x[(n * C + c) * HW + s]) - m);
    const float inv = 1.f / sum;
    for (int c = 0; c < C; ++c) {
      const long long at = (n * C + c) * HW + s;
      y[at] = __float2bfloat16(expf(__bfloat162float(x[at]) - m) * inv);
    }
  }
}

void channel_softmax(__nv_bfloat16* y, const __nv_bfloat16* x, int N, int C, int H, int W, cudaStream_t stream) {
  const long long pixels = (long long)N * H * W;
  long long blocks = (pixels + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  channel_softmax_nchw<<<(unsigned)blocks, 256, 0, stream>>>(y, x, N, C, H * W);
}
