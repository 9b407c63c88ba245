// Channel softmax of an NCHW tensor in fp32 (a segmentation head's per-pixel class softmax): one thread per (n, hw)
// pixel over a 1-D grid, three passes over the C channels (max, sum of exp, normalize), each pass declaring the
// element's offset again (`const int at = (n * C + c) * HW + hw;`), as code written pass by pass does.
/* kerntune:
args  = ["prob: out f32[N * C * HW]", "logit: in f32[N * C * HW]", "N: i32 = N", "C: i32 = C", "HW: i32 = HW"]
sizes = [{ N = 8, C = 150, HW = 16384 }, { N = 2, C = 21, HW = 1 }, { N = 3, C = 19, HW = 4099 }]
grid  = "cdiv(N * HW, 256)"
block = 256
*/
__global__ void pixel_class_softmax(float* __restrict__ prob, const float* __restrict__ logit, int N, int C, int HW) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= N * HW) return;
  const int n = p / HW, hw = p % HW;
  float m = -3.402823466e38f;
  for (int c = 0; c < C; ++c) {
    const int at = (n * C + c) * HW + hw;
    m = fmaxf(m, logit[at]);
  }
  float s = 0.f;
  for (int c = 0; c < C; ++c) {
    const int at = (n * C + c) * HW + hw;
    s += expf(logit[at] - m);
  }
  for (int c = 0; c < C; ++c) {
    const int at = (n * C + c) * HW + hw;
    prob[at] = expf(logit[at] - m) / s;
  }
}

void pixel_class_softmax_launch(float* prob, const float* logit, int N, int C, int HW, cudaStream_t stream) {
  pixel_class_softmax<<<(N * HW + 255) / 256, 256, 0, stream>>>(prob, logit, N, C, HW);
}
