// FasterTransformer's masked attention softmax before ALiBi (BERT / GPT encoders, TensorRT-LLM's unfused attention
// with no linear-bias slopes): fp16 QK^T scores [batch, heads, q_len, k_len] times qk_scale plus (1 - m) * -10000
// where m is an fp16 0/1 attention mask [batch, q_len, k_len] shared by the heads (1 keeps the key); __expf, the row's
// sum + 1e-6 inverted once by __fdividef, each probability that inverse times the exponential, rounded to fp16. One
// block per (query, batch * heads) row, the row's scores cached in registers (k_len <= 4 * blockDim.x).
#include <cuda_fp16.h>

#define ITEMS 4

__device__ __forceinline__ float block_max(float v, float* red) {
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = -1e20f;
  for (int i = 0; i < (int)(blockDim.x >> 5); ++i) r = fmaxf(r, red[i]);
  __syncthreads();
  return r;
}

__device__ __forceinline__ float block_sum(float v, float* red) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = 0.f;
  for (int i = 0; i < (int)(blockDim.x >> 5); ++i) r += red[i];
  __syncthreads();
  return r;
}

/* kerntune:
args  = ["qk_buf: out f16[b * h * q * k]", "qk_src: in f16[b * h * q * k] ~ uniform(-6, 6)",
         "attr_mask: in f16[b * q * k] ~ randint(0, 2)", "batch_size: i32 = b", "head_num: i32 = h",
         "seq_len_q: i32 = q", "seq_len_k: i32 = k", "qk_scale: f32 = 0.125"]
sizes = [{ b = 4, h = 16, q = 256, k = 256 }, { b = 3, h = 5, q = 9, k = 77 }]
grid  = ["q", "b * h"]
block = "round_up(cdiv(k, 4), 32)"
atol  = 1e-5
*/
__global__ void attn_softmax(__half* qk_buf, const __half* qk_src, const __half* attr_mask, int batch_size,
                             int head_num, int seq_len_q, int seq_len_k, float qk_scale) {
  __shared__ float red[32];
  const int qi = blockIdx.x, bh = blockIdx.y, bi = bh / head_num;
  const long long row = ((long long)bh * seq_len_q + qi) * seq_len_k;
  const long long mrow = ((long long)bi * seq_len_q + qi) * seq_len_k;
  float data[ITEMS];
  float local_max = -1e20f;
  for (int i = 0; i < ITEMS; ++i) {
    const int ki = threadIdx.x + i * blockDim.x;
    data[i] = -1e20f;
    if (ki < seq_len_k) {
      const float mask_val = (1.0f - __half2float(attr_mask[mrow + ki])) * -10000.0f;
      data[i] = __half2float(qk_src[row + ki]) * qk_scale + mask_val;
      local_max = fmaxf(local_max, data[i]);
    }
  }
  const float m = block_max(local_max, red);
  float local_sum = 0.f;
  for (int i = 0; i < ITEMS; ++i) {
    const int ki = threadIdx.x + i * blockDim.x;
    if (ki < seq_len_k) {
      data[i] = __expf(data[i] - m);
      local_sum += data[i];
    }
  }
  const float inv = __fdividef(1.0f, block_sum(local_sum, red) + 1e-6f);
  for (int i = 0; i < ITEMS; ++i) {
    const int ki = threadIdx.x + i * blockDim.x;
    if (ki < seq_len_k) qk_buf[row + ki] = __float2half(data[i] * inv);
  }
}

void invoke_attn_softmax(__half* qk_buf, const __half* qk_src, const __half* attr_mask, int batch_size, int head_num,
                         int seq_len_q, int seq_len_k, float qk_scale, cudaStream_t stream) {
  const int block = ((seq_len_k + ITEMS - 1) / ITEMS + 31) / 32 * 32;
  attn_softmax<<<dim3(seq_len_q, batch_size * head_num), block, 0, stream>>>(qk_buf, qk_src, attr_mask, batch_size,
                                                                            head_num, seq_len_q, seq_len_k, qk_scale);
}
