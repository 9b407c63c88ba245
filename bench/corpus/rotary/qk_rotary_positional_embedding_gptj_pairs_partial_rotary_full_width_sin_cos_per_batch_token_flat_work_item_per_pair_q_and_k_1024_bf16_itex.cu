// Fused q / k rotary embedding as Intel Extension for TensorFlow writes its QKRotaryPositionalEmbedding op
// (intel/intel-extension-for-tensorflow, itex/core/kernels/gpu/ ... ComputeRotaryPositionalEmbeddingKernel<T>
// behind functor::RotaryPositionalEmbedding, written for GPT-J: 16 heads of 256 with the first 64 dims rotated),
// ported from its SYCL parallel_for to a CUDA kernel, bf16:
//   q, k, output_q, output_k [B * beam, length, num_heads, head_dim]; sin, cos [B * beam, length, 1, rotary_dim]
//   with the FULL rotary width per token (each angle stored twice, at 2i and 2i + 1, and both copies read);
//   GPT-J ADJACENT PAIRS (2i, 2i + 1) over the first rotary_dim dims of each head, the rest untouched;
//   one work item per (token, head, pair) doing the pair of q AND the pair of k, flat int index, early return past
//   total_size = B * length * num_heads * rotary_dim / 2, work group = the device's max work-group size (1024
//   threads here), grid ceil(total_size / 1024); every value upcast to float, one rounding per store; argument order
//   (q, k, sin, cos, output_q, output_k, Length, Num_heads, head_dim, rotary_dim = the HALF rotary width,
//   total_size), Length unused as in the original
// Changed: ITEX forwards q and k as the op's outputs (set_output(0, q)), so the rotation is in place and the
// unrotated tail of each head keeps its input; the harness cannot alias buffers, so output_q / output_k are
// separate inout buffers whose tail columns are left as they are, like the forwarded ones. The broadcast variant
// (sin / cos shared by the batch) and the TensorFlow op plumbing are left out. No bug found.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace itex {
namespace functor {

/* kerntune:
args  = ["q: in bf16[tokens * N * D]", "k: in bf16[tokens * N * D]", "sin: in bf16[tokens * R] ~ uniform(-1, 1)",
         "cos: in bf16[tokens * R] ~ uniform(-1, 1)", "output_q: inout bf16[tokens * N * D]", "output_k: inout bf16[tokens * N * D]",
         "Length: i32 = L", "Num_heads: i32 = N", "head_dim: i32 = D", "rotary_dim: i32 = R / 2",
         "total_size: i32 = tokens * N * R / 2"]
sizes = [{ tokens = 16384, L = 2048, N = 16, D = 256, R = 64 }, { tokens = 4, L = 1, N = 16, D = 256, R = 64 },
         { tokens = 999, L = 333, N = 7, D = 80, R = 26 }]
grid  = "cdiv(tokens * N * R / 2, 1024)"
block = 1024
template_args = ["__nv_bfloat16"]
*/
template <typename T>
__global__ void ComputeRotaryPositionalEmbeddingKernel(const T* q, const T* k, const T* sin, const T* cos,
                                                       T* output_q, T* output_k, int Length, int Num_heads,
                                                       int head_dim, int rotary_dim, int total_size) {
  // total size = q_rotary_size
  // q, k: [Batch*beam, length, num_attention_heads, head_dim]
  // sin, cos: [Batch*beam, length, 1, rotary_dim * 2]
  // rotate on the first rotary_dim * 2 elements of head_dim
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= total_size) return;
  // b,l
  int x = id / (Num_heads * rotary_dim);
  int n = (id - x * Num_heads * rotary_dim) / rotary_dim;
  int idx = id % rotary_dim;
  // out_q[b,l,n,2*idx]   = q[b,l,n,2*idx] * cos[b,l,0,2*idx] - q[b,l,n,2*idx+1] * sin[b,l,0,2*idx]
  // out_q[b,l,n,2*idx+1] = q[b,l,n,2*idx+1] * cos[b,l,0,2*idx+1] + q[b,l,n,2*idx] * sin[b,l,0,2*idx+1]
  // k is the same

  // [b,l,n,2*idx], [b,l,n,2*idx+1]
  int x1 = 2 * idx + n * head_dim + x * head_dim * Num_heads;
  int x2 = 1 + 2 * idx + n * head_dim + x * head_dim * Num_heads;
  int s_x1 = 2 * idx + x * rotary_dim * 2;
  int s_x2 = 1 + 2 * idx + x * rotary_dim * 2;
  float tmp_q_x1 = static_cast<float>(q[x1]);
  float tmp_q_x2 = static_cast<float>(q[x2]);
  float tmp_k_x1 = static_cast<float>(k[x1]);
  float tmp_k_x2 = static_cast<float>(k[x2]);
  float tmp_sin_x1 = static_cast<float>(sin[s_x1]);
  float tmp_sin_x2 = static_cast<float>(sin[s_x2]);
  float tmp_cos_x1 = static_cast<float>(cos[s_x1]);
  float tmp_cos_x2 = static_cast<float>(cos[s_x2]);
  output_q[x1] = static_cast<T>(tmp_q_x1 * tmp_cos_x1 - tmp_q_x2 * tmp_sin_x1);
  output_q[x2] = static_cast<T>(tmp_q_x2 * tmp_cos_x2 + tmp_q_x1 * tmp_sin_x2);
  output_k[x1] = static_cast<T>(tmp_k_x1 * tmp_cos_x1 - tmp_k_x2 * tmp_sin_x1);
  output_k[x2] = static_cast<T>(tmp_k_x2 * tmp_cos_x2 + tmp_k_x1 * tmp_sin_x2);
}

constexpr int kMaxWorkGroupSize = 1024;  // the device's max work-group size (get_info<max_work_group_size>)

// q, k, output_q, output_k: device [B, Length, Num_heads, head_dim]; sin, cos: device [B, Length, rotary_dim_full];
// rotary_dim_half = rotary_dim_full / 2
template <typename T>
void RotaryPositionalEmbedding(const T* q, const T* k, const T* sin, const T* cos, T* output_q, T* output_k, int B,
                               int Length, int Num_heads, int head_dim, int rotary_dim_half, cudaStream_t stream) {
  const int total_size = B * Length * Num_heads * rotary_dim_half;
  const int total_threads = kMaxWorkGroupSize;
  const int num_workgroups = (total_size + total_threads - 1) / total_threads;
  ComputeRotaryPositionalEmbeddingKernel<T><<<num_workgroups, total_threads, 0, stream>>>(
      q, k, sin, cos, output_q, output_k, Length, Num_heads, head_dim, rotary_dim_half, total_size);
}

template void RotaryPositionalEmbedding<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                       const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                                                       __nv_bfloat16*, int, int, int, int, int, cudaStream_t);

}  // namespace functor
}  // namespace itex
