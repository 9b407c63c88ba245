// GPT-J (interleaved) rotary out of place over query and key, fp16 with fp32 arithmetic, from a tensor of ANGLES
// rather than a cos/sin cache: the caller gathered each token's angles (position * inv_freq, one a pair of the
// rotary channels: freqs [tokens, rot_dim / 2], fp32, as Megatron's and Transformer Engine's freqs are built and
// M-RoPE-style callers gather them per token), the kernel takes their sine and cosine with the fast __sincosf where
// it uses them. Partial rotary: the channels rot_dim..head_dim copied through. Token-major [tokens, heads,
// head_dim], one block per token, the block's threads striding the (head, pair) range of the query heads, then of
// the key heads.
#include <cuda_fp16.h>

__device__ __forceinline__ void rope_heads(const __half* __restrict__ in, __half* __restrict__ out,
                                           const float* __restrict__ ang, int heads, int head_dim, int rot_dim) {
  const int half_rot = rot_dim / 2;
  for (int j = threadIdx.x; j < heads * half_rot; j += blockDim.x) {
    const int head = j / half_rot, i = j % half_rot;
    float sn, cs;
    __sincosf(ang[i], &sn, &cs);
    const int e = head * head_dim + 2 * i;
    const float x0 = __half2float(in[e]), x1 = __half2float(in[e + 1]);
    out[e] = __float2half(x0 * cs - x1 * sn);
    out[e + 1] = __float2half(x1 * cs + x0 * sn);
  }
  const int pass = head_dim - rot_dim;
  for (int j = threadIdx.x; j < heads * pass; j += blockDim.x) {
    const int e = (j / pass) * head_dim + rot_dim + j % pass;
    out[e] = in[e];
  }
}

/* kerntune:
args  = ["q: in f16[tokens * nq * hd]", "k: in f16[tokens * nkv * hd]",
         "angles: in f32[tokens * rd / 2] ~ uniform(0, 100)",
         "q_out: out f16[tokens * nq * hd]", "k_out: out f16[tokens * nkv * hd]",
         "num_q_heads: i32 = nq", "num_kv_heads: i32 = nkv", "head_dim: i32 = hd", "rot_dim: i32 = rd"]
sizes = [{ tokens = 1024, nq = 32, nkv = 8, hd = 128, rd = 64 }, { tokens = 7, nq = 16, nkv = 16, hd = 64, rd = 64 }]
grid  = "tokens"
block = "256"
*/
__global__ void rope_angles_gptj_qk(const __half* __restrict__ q, const __half* __restrict__ k,
                                    const float* __restrict__ angles, __half* __restrict__ q_out,
                                    __half* __restrict__ k_out, int num_q_heads, int num_kv_heads, int head_dim,
                                    int rot_dim) {
  const long long t = blockIdx.x;
  const float* ang = angles + t * (rot_dim / 2);
  rope_heads(q + t * num_q_heads * head_dim, q_out + t * num_q_heads * head_dim, ang, num_q_heads, head_dim,
             rot_dim);
  rope_heads(k + t * num_kv_heads * head_dim, k_out + t * num_kv_heads * head_dim, ang, num_kv_heads, head_dim,
             rot_dim);
}
