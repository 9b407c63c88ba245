// GeGLU written in place over the gate, through accessor objects (code that wraps each matrix in a view class with
// get/set methods, as ExLlama's MatrixView does): gate = gelu(gate) * up over [rows, cols] fp32 matrices, the erf
// GELU in fp32; one element per thread on a 2-D grid of 16 x 16 blocks.
struct MatF {
  float* ptr;
  int cols;
  __device__ __forceinline__ MatF(float* p, int c) : ptr(p), cols(c) {}
  __device__ __forceinline__ float get(int r, int c) const { return ptr[(long long)r * cols + c]; }
  __device__ __forceinline__ void set(int r, int c, float v) { ptr[(long long)r * cols + c] = v; }
};

struct ConstMatF {
  const float* ptr;
  int cols;
  __device__ __forceinline__ ConstMatF(const float* p, int c) : ptr(p), cols(c) {}
  __device__ __forceinline__ float get(int r, int c) const { return ptr[(long long)r * cols + c]; }
};

/* kerntune:
args  = ["gate: inout f32[rows * cols]", "up: in f32[rows * cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 4096 }, { rows = 3, cols = 11008 }, { rows = 515, cols = 1001 }]
grid  = ["cdiv(cols, 16)", "cdiv(rows, 16)"]
block = [16, 16]
*/
__global__ void geglu_views(float* gate, const float* up, int rows, int cols) {
  MatF g(gate, cols);
  ConstMatF u(up, cols);
  const int c = blockIdx.x * 16 + threadIdx.x, r = blockIdx.y * 16 + threadIdx.y;
  if (r >= rows || c >= cols) return;
  const float v = g.get(r, c);
  const float a = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
  g.set(r, c, a * u.get(r, c));
}

void geglu_views_launch(float* gate, const float* up, int rows, int cols, cudaStream_t stream) {
  geglu_views<<<dim3((cols + 15) / 16, (rows + 15) / 16), dim3(16, 16), 0, stream>>>(gate, up, rows, cols);
}
