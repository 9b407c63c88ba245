// Bias + residual + ReLU epilogue, one element per thread.
/* kerntune:
args  = ["out: out f32[rows * cols]", "x: in f32[rows * cols]", "bias: in f32[cols]", "res: in f32[rows * cols]",
         "n: i32 = rows * cols", "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 4096 }, { rows = 1001, cols = 3073 }]
grid  = "cdiv(rows * cols, 256)"
block = "256"
*/
__global__ void bias_residual_relu(float* out, const float* x, const float* bias, const float* res, int n, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i] + bias[i % cols] + res[i];
    out[i] = v > 0.f ? v : 0.f;
  }
}

void launch(float* out, const float* x, const float* bias, const float* res, int rows, int cols) {
  int n = rows * cols;
  bias_residual_relu<<<(n + 255) / 256, 256>>>(out, x, bias, res, n, cols);
}
