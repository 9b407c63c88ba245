// Attention softmax with decomposed relative positions in the style of facebookresearch/segment-anything
// (segment_anything/modeling/image_encoder.py: Attention.forward with use_rel_pos, add_decomposed_rel_pos, then
// attn.softmax(dim=-1); the ViT image encoder's window and global attention), the bias add and softmax written as
// one CUDA kernel, fp32 (SAM's encoder runs in fp32):
//   attn [B * nHead, q_h * q_w, k_h * k_w] fp32 (q * scale @ k^T), rel_h [B * nHead, q_h, q_w, k_h] and rel_w
//   [B * nHead, q_h, q_w, k_w] fp32 (einsum("bhwc,hkc->bhwk", r_q, Rh) and ("bhwc,wkc->bhwk", r_q, Rw));
//   attn.view(B, q_h, q_w, k_h, k_w) + rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]: key (kh, kw) of query
//   (qh, qw) gets rel_h[.., qh, qw, kh] + rel_w[.., qh, qw, kw]; OUT OF PLACE softmax over the k_h * k_w keys
//   launch (ours): ONE BLOCK PER QUERY ROW (grid = B * nHead * q_h * q_w), 256 threads; the biased row is cached
//   in dynamic shared memory (k_h * k_w floats), block max and sum by __shfl_down_sync within warps and a
//   __shared__ float[32] across them (thread 0 broadcasts through it), output expf(v - max) * (1 / sum); stream
// Sizes: 14 x 14 windows of ViT-B on a padded 1024 x 1024 image (25 windows x 12 heads), a small global map, and a
// non-square tail. No bug found.
// Tolerance: probabilities over up to 196 keys; atol 1e-6.
#include <cuda_runtime.h>

#include <cfloat>

constexpr int kThreads = 256;

__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffff, v, offset));
    return v;
}

__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

/* kerntune:
args  = ["attn: in f32[BH * H * W * H * W]", "rel_h: in f32[BH * H * W * H]", "rel_w: in f32[BH * H * W * W]",
         "out: out f32[BH * H * W * H * W]", "q_h: i32 = H", "q_w: i32 = W", "k_h: i32 = H", "k_w: i32 = W"]
sizes = [{ BH = 300, H = 14, W = 14 }, { BH = 2, H = 8, W = 8 }, { BH = 7, H = 13, W = 11 }]
grid  = "BH * H * W"
block = 256
smem  = "H * W * 4"
atol  = 1e-6
*/
__global__ void add_decomposed_rel_pos_softmax_kernel(const float* __restrict__ attn, const float* __restrict__ rel_h,
                                                      const float* __restrict__ rel_w, float* __restrict__ out,
                                                      int q_h, int q_w, int k_h, int k_w) {
    extern __shared__ float row_buf[];  // k_h * k_w
    __shared__ float warp_buf[32];

    const long long row = blockIdx.x;  // (b, qh, qw)
    const int n_keys = k_h * k_w;
    const float* a = attn + row * n_keys;
    const float* rh = rel_h + row * k_h;
    const float* rw = rel_w + row * k_w;
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int n_warps = blockDim.x / 32;

    float local_max = -FLT_MAX;
    for (int k = threadIdx.x; k < n_keys; k += blockDim.x) {
        const float v = a[k] + rh[k / k_w] + rw[k % k_w];
        row_buf[k] = v;
        local_max = fmaxf(local_max, v);
    }
    local_max = warp_reduce_max(local_max);
    if (lane == 0) warp_buf[warp] = local_max;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = warp_buf[0];
        for (int i = 1; i < n_warps; ++i) m = fmaxf(m, warp_buf[i]);
        warp_buf[0] = m;
    }
    __syncthreads();
    const float row_max = warp_buf[0];
    __syncthreads();

    float local_sum = 0.f;
    for (int k = threadIdx.x; k < n_keys; k += blockDim.x) {
        const float e = expf(row_buf[k] - row_max);
        row_buf[k] = e;
        local_sum += e;
    }
    local_sum = warp_reduce_sum(local_sum);
    if (lane == 0) warp_buf[warp] = local_sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.f;
        for (int i = 0; i < n_warps; ++i) s += warp_buf[i];
        warp_buf[0] = s;
    }
    __syncthreads();
    const float inv_sum = 1.f / warp_buf[0];

    float* o = out + row * n_keys;
    for (int k = threadIdx.x; k < n_keys; k += blockDim.x) {
        o[k] = row_buf[k] * inv_sum;
    }
}

// attn, out: device [B * num_heads, q_h * q_w, k_h * k_w] fp32; rel_h: [B * num_heads, q_h, q_w, k_h];
// rel_w: [B * num_heads, q_h, q_w, k_w].
void add_decomposed_rel_pos_softmax(const float* attn, const float* rel_h, const float* rel_w, float* out,
                                    int batch_heads, int q_h, int q_w, int k_h, int k_w, cudaStream_t stream) {
    const int rows = batch_heads * q_h * q_w;
    const size_t smem = (size_t)k_h * k_w * sizeof(float);
    add_decomposed_rel_pos_softmax_kernel<<<rows, kThreads, smem, stream>>>(attn, rel_h, rel_w, out, q_h, q_w, k_h,
                                                                            k_w);
}
