// causal softmax over attention scores bf16, in place, top-left aligned (query q sees keys 0 .. q, as a kernel
// written for q_len == k_len and reused with longer key caches), scores [batch * heads, q_len, k_len], one block of
// 256 threads per score row, the query from the block index (blockIdx.x % q_len), a shared-memory tree for the max and
// the sum, the masked keys written 0 without being read, the 1/sqrt(d) scale applied in the kernel.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

/* kerntune:
args  = ["scores: inout bf16[bh * q_len * k_len]", "bh: i32 = bh", "q_len: i32 = q_len", "k_len: i32 = k_len",
         "inv_sqrt_d: f32 = 0.125"]
sizes = [{ bh = 64, q_len = 512, k_len = 512 }, { bh = 32, q_len = 16, k_len = 700 }]
grid  = "bh * q_len"
block = "256"
atol  = 1e-6
*/
__global__ void causal_softmax_inplace(__nv_bfloat16* scores, int bh, int q_len, int k_len, float inv_sqrt_d) {
  __shared__ float red[256];
  const int q = blockIdx.x % q_len;
  __nv_bfloat16* row = scores + (size_t)blockIdx.x * k_len;
  const int visible = q + 1 < k_len ? q + 1 : k_len;
  float m = -INFINITY;
  for (int k = threadIdx.x; k < visible; k += blockDim.x) m = fmaxf(m, __bfloat162float(row[k]) * inv_sqrt_d);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int k = threadIdx.x; k < visible; k += blockDim.x) sum += __expf(__bfloat162float(row[k]) * inv_sqrt_d - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.f / red[0];
  for (int k = threadIdx.x; k < k_len; k += blockDim.x)
    row[k] = k < visible ? __float2bfloat16(__expf(__bfloat162float(row[k]) * inv_sqrt_d - m) * inv)
                         : __float2bfloat16(0.f);
}

void causal_softmax(__nv_bfloat16* scores, int batch_heads, int q_len, int k_len, float inv_sqrt_d,
                    cudaStream_t stream) {
  causal_softmax_inplace<<<batch_heads * q_len, 256, 0, stream>>>(scores, batch_heads, q_len, k_len, inv_sqrt_d);
}
