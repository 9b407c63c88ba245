// GEGLU with the quick GELU (llama.cpp's GLU op GEGLU_QUICK, Transformer Engine's qgeglu, CLIP's quick_gelu):
// dst = x * sigmoid(1.702 x) * g, the gate x and the up g two fp32 tensors of the output's shape, the coefficient a
// constant local (-1.702f, as ggml writes it), the sigmoid as 1 / (1 + expf(c * x)). A flat grid over k elements.
/* kerntune:
args  = ["x: in f32[rows * cols]", "g: in f32[rows * cols]", "dst: out f32[rows * cols]", "k: i32 = rows * cols"]
sizes = [{ rows = 1024, cols = 4096 }, { rows = 5, cols = 3333 }]
grid  = "cdiv(rows * cols, 256)"
block = "256"
*/
static __global__ void geglu_quick_f32(const float* x, const float* g, float* dst, const int k) {
  const float GELU_QUICK_COEF = -1.702f;
  const int i = blockDim.x * blockIdx.x + threadIdx.x;
  if (i >= k) {
    return;
  }
  const float xi = x[i];
  dst[i] = xi * (1.0f / (1.0f + expf(GELU_QUICK_COEF * xi))) * g[i];
}

void geglu_quick_f32_cuda(const float* x, const float* g, float* dst, const int k, cudaStream_t stream) {
  const int num_blocks = (k + 255) / 256;
  geglu_quick_f32<<<num_blocks, 256, 0, stream>>>(x, g, dst, k);
}
