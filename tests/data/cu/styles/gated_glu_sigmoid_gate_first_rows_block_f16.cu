// The original GLU (Dauphin et al.; torch.nn.functional.glu with the halves the other way round, as some
// convolutional sequence models write it): out = sigmoid(g) * v for each row [g | v] of 2 * dim values, the gate in
// the FIRST half; fp16 storage, fp32 math, the sigmoid taken as 1 / (1 + expf(-g)) into a local, one rounding at the
// store. One block per row, a block-stride loop over the row's dim outputs.
#include <cuda_fp16.h>

/* kerntune:
args  = ["y: out f16[rows * dim]", "x: in f16[rows * 2 * dim]", "rows: i32 = rows", "dim: i32 = dim"]
sizes = [{ rows = 8192, dim = 4096 }, { rows = 3, dim = 11008 }, { rows = 513, dim = 1001 }]
grid  = "rows"
block = 256
*/
__global__ void glu_gate_first(__half* __restrict__ y, const __half* __restrict__ x, int rows, int dim) {
  const int r = blockIdx.x;
  if (r >= rows) return;
  const __half* in = x + (long long)r * 2 * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    const float g = __half2float(in[j]);
    const float v = __half2float(in[dim + j]);
    const float s = 1.0f / (1.0f + expf(-g));
    y[(long long)r * dim + j] = __float2half(s * v);
  }
}

void glu_gate_first_launch(__half* y, const __half* x, int rows, int dim, cudaStream_t stream) {
  glu_gate_first<<<rows, 256, 0, stream>>>(y, x, rows, dim);
}
