// SwiGLU over interleaved (gate, up) pairs, fp32, one flat index, extern "C"
/* kerntune:
args  = ["x: in f32[rows * 2 * cols]", "o: out f32[rows * cols]", "cols: i32 = cols", "total: i32 = rows * cols"]
sizes = [{ rows = 64, cols = 1024 }, { rows = 7, cols = 999 }]
grid  = "cdiv(rows * cols, 256)"
block = "256"
*/
extern "C" __global__ void swiglu_pairs(const float* x, float* o, int cols, int total) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  float g = x[2 * i], u = x[2 * i + 1];
  o[i] = g / (1.0f + expf(-g)) * u;
}

extern "C" void swiglu(const float* x, float* o, int rows, int cols, cudaStream_t stream) {
  const int total = rows * cols;
  swiglu_pairs<<<(total + 255) / 256, 256, 0, stream>>>(x, o, cols, total);
}
