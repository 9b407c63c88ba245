// Softmax over the first lengths[r] columns of each row (CTranslate2's masked softmax, the PyTorch cunn_SoftMaxForward
// port it carries: one int32 length per ROW, the caller having repeated each batch's length over its heads and
// queries); the columns past the length written 0. fp32, one block of 256 threads per row,
// three passes (max, sum of exponentials, epilogue exp(x - max) / sum), block reductions through shared memory.
#include <cstdint>

/* kerntune:
args  = ["y: out f32[rows * cols]", "x: in f32[rows * cols]", "cols: i32 = cols",
         "lengths: in i32[rows] ~ randint(1, cols + 1)"]
sizes = [{ rows = 4096, cols = 1024 }, { rows = 37, cols = 333 }]
grid  = "rows"
block = "256"
atol  = 1e-6
*/
__global__ void softmax_lengths(float* __restrict__ y, const float* __restrict__ x, int cols,
                                const int32_t* __restrict__ lengths) {
  __shared__ float red[32];
  const int row = blockIdx.x;
  const float* in = x + (size_t)row * cols;
  float* out = y + (size_t)row * cols;
  const int size = lengths[row];
  for (int i = size + threadIdx.x; i < cols; i += blockDim.x) out[i] = 0.f;
  float m = -3.402823466e38f;
  for (int i = threadIdx.x; i < size; i += blockDim.x) m = fmaxf(m, in[i]);
  for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  m = -3.402823466e38f;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  float s = 0.f;
  for (int i = threadIdx.x; i < size; i += blockDim.x) s += expf(in[i] - m);
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
  __syncthreads();
  s = 0.f;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s += red[w];
  for (int i = threadIdx.x; i < size; i += blockDim.x) out[i] = expf(in[i] - m) / s;
}

void softmax_lengths_launch(float* y, const float* x, int rows, int cols, const int32_t* lengths,
                            cudaStream_t stream) {
  softmax_lengths<<<rows, 256, 0, stream>>>(y, x, cols, lengths);
}
