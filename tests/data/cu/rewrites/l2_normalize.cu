// Row-wise L2 normalize: one block of 256 threads per row, sum of squares by a shared-memory tree, then scale.
/* kerntune:
args  = ["y: out f32[rows * dim]", "x: in f32[rows * dim]", "dim: i32 = dim"]
sizes = [{ rows = 8192, dim = 2048 }, { rows = 1000, dim = 1531 }]
grid  = "rows"
block = "256"
*/
__global__ void l2_normalize(float* y, const float* x, int dim) {
  __shared__ float partial[256];
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  float ss = 0.f;
  for (int i = tid; i < dim; i += blockDim.x) {
    float v = x[(long long)row * dim + i];
    ss += v * v;
  }
  partial[tid] = ss;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    __syncthreads();
  }
  const float inv = 1.0f / sqrtf(partial[0] + 1e-12f);
  for (int i = tid; i < dim; i += blockDim.x) y[(long long)row * dim + i] = x[(long long)row * dim + i] * inv;
}

void l2n(float* y, const float* x, int rows, int dim) { l2_normalize<<<rows, 256>>>(y, x, dim); }
