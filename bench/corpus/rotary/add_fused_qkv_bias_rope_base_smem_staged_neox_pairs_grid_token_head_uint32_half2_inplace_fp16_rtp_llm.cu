// QKV bias + RoPE in place on the fused QKV buffer in the style of Alibaba rtp-llm (rtp_llm/cpp/kernels/
// unfused_attention_kernels.cu: add_fusedQKV_bias_transpose_kernel with store_qkv, and rotary_position_embedding.h:
// apply_rope / normal_rope for RopeStyle::Base with LinearScaleRope, fp16 (Qwen2-style q/k/v biases):
//   QKV [token_num, head_num + 2 * head_num_kv, size_per_head] fp16 (the GEMM output: q heads, k heads, v heads),
//   qkv_bias [(head_num + 2 * head_num_kv) * size_per_head] fp16, position_ids [token_num] int32
//   Vec_t<half> = uint32_t: each thread holds 2 adjacent halves of its head (tidx * 2); bias added in half2
//   arithmetic (__hadd2, rounded to fp16), then RoPE through SHARED MEMORY: the head's first rope_dim values are
//   staged in smem, each of the rope_dim / 2 working threads gathers the NeoX pair (i, i + rope_dim / 2)
//   (RotaryHalfRead), rotates it in fp32 with coef = (cos, sin) of position / base^(2i / rope_dim) / scale
//   (powf + sincosf, computed per call: no cos/sin cache), writes the pair back (RotaryHalfWrite), and re-reads its
//   own two values; one rounding to fp16 (float2_to_half2); partial rotary when rope_dim < size_per_head
//   q for every head, k and v only for head_idx < head_num_kv (GQA), all stored back IN PLACE (store_qkv)
//   launch: grid (token_num, head_num), block = round_up(size_per_head / 2, 32), dynamic smem 2 * rope_dim *
//   sizeof(T) (rtp-llm's size), template over T with the Vec_t trait; int indices; stream
// Kept from rtp-llm: argument names, the Vec_t / vector_size traits, the smem-staged pair exchange, sincos of the
// on-the-fly frequency. Dropped: padding offsets, prefix prompts, the transposed / paged-KV stores, fp8 and logn
// (this file is the store_qkv path only). Fixed: the original returns threads past size_per_head / 2 before the
// __syncthreads of normal_rope (block padded to 32); here they stay and skip the work through a flag.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rtp_llm {

template<typename T>
struct Vec_t {};

template<>
struct Vec_t<half> {
    using Type                = uint32_t;
    static constexpr int size = 2;
};

__device__ __inline__ float2 half2_to_float2(uint32_t v) {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
}

__device__ __inline__ uint32_t float2_to_half2(float2 f) {
    __half2 h = __float22half2_rn(f);
    return *reinterpret_cast<uint32_t*>(&h);
}

__device__ __inline__ uint32_t add(uint32_t a, uint32_t b) {
    __half2 c = __hadd2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<uint32_t*>(&c);
}

__device__ __inline__ float2 rotary_embedding_coefficient(
    const int zid, const int rot_embed_dim, const float t_step, const float base, const float scale) {
    float inv_freq = t_step / powf(base, zid / (float)rot_embed_dim);
    inv_freq       = inv_freq / scale;  // LinearScaleRope
    float sin_i, cos_i;
    sincosf(inv_freq, &sin_i, &cos_i);
    return {cos_i, sin_i};
}

__device__ __inline__ float2 rotary_embedding_transform(const float2 v, const float2& coef) {
    float2 rot_v;
    rot_v.x = coef.x * v.x - coef.y * v.y;
    rot_v.y = coef.x * v.y + coef.y * v.x;
    return rot_v;
}

__device__ __inline__ uint32_t rotary_embedding_transform(const uint32_t v, const float2& coef) {
    float2 fv     = half2_to_float2(v);
    float2 rot_fv = rotary_embedding_transform(fv, coef);
    return float2_to_half2(rot_fv);
}

// The pair (idx, idx + dim) of the staged head packed into one vector, and back.
__device__ __inline__ void RotaryHalfRead(uint32_t& vec, half* smem, const int idx, int dim) {
    union {
        uint32_t r;
        half     t[2];
    } result;
    result.t[0] = smem[idx];
    result.t[1] = smem[idx + dim];
    vec         = result.r;
}

__device__ __inline__ void RotaryHalfWrite(uint32_t& vec, half* smem, const int idx, int dim) {
    union {
        uint32_t r;
        half     t[2];
    } result;
    result.r        = vec;
    smem[idx]       = result.t[0];
    smem[idx + dim] = result.t[1];
}

template<typename scalar_t, typename vector_t>
__device__ __inline__ void normal_rope(vector_t&   x,
                                       scalar_t*   smem,
                                       const int   tidx,
                                       const int   seqidx,
                                       const int   dim,
                                       const float base,
                                       const float scale,
                                       const bool  active) {
    const int  vec_size  = Vec_t<scalar_t>::size;
    const int  rope_idx  = tidx * vec_size;
    const bool work      = active && rope_idx < dim;
    const int  rope_tidx = rope_idx / vec_size;

    if (work) {
        reinterpret_cast<vector_t*>(smem)[rope_tidx] = x;
    }

    __syncthreads();
    if (work) {
        RotaryHalfRead(x, smem, rope_tidx, dim / 2);
        const float2 coef = rotary_embedding_coefficient(2 * rope_tidx, dim, seqidx, base, scale);
        x                 = rotary_embedding_transform(x, coef);
        RotaryHalfWrite(x, smem, rope_tidx, dim / 2);
    }

    __syncthreads();

    if (work) {
        x = reinterpret_cast<vector_t*>(smem)[rope_tidx];
    }
}

/* kerntune:
args  = ["QKV: inout f16[T * (H + 2 * HKV) * D]", "qkv_bias: in f16[(H + 2 * HKV) * D]",
         "position_ids: in i32[T] ~ randint(0, 4096)", "head_num: i32 = H", "head_num_kv: i32 = HKV",
         "size_per_head: i32 = D", "rope_dim: i32 = R", "rope_base: f32 = 1000000.0", "rope_scale: f32 = 1.0"]
sizes = [{ T = 8192, H = 32, HKV = 8, D = 128, R = 128 }, { T = 4, H = 32, HKV = 8, D = 128, R = 128 },
         { T = 37, H = 12, HKV = 4, D = 80, R = 40 }]
grid  = ["T", "H"]
block = "round_up(D / 2, 32)"
smem  = "2 * R * 2"
template_args = ["half"]
*/
template<typename T>
__global__ void add_fusedQKV_bias_rope_kernel(T*                  QKV,
                                              const T* __restrict qkv_bias,
                                              const int*          position_ids,
                                              const int           head_num,
                                              const int           head_num_kv,
                                              const int           size_per_head,
                                              const int           rope_dim,
                                              const float         rope_base,
                                              const float         rope_scale) {
    // QKV: [token_num, 3 (q heads, k heads, v heads), head, size_per_head]; q and k rotated, all three biased, in place
    extern __shared__ __align__(sizeof(float2)) char smem_[];  // align on largest vector type

    constexpr int vec_size  = Vec_t<T>::size;
    using Vec_type          = typename Vec_t<T>::Type;
    const int  token_idx    = blockIdx.x;
    const int  head_idx     = blockIdx.y;
    const int  tidx         = threadIdx.x;
    const bool active       = tidx * vec_size < size_per_head;

    const int hidden_idx = head_idx * size_per_head + tidx * vec_size;
    const int n          = head_num * size_per_head;
    const int kv_n       = head_num_kv * size_per_head;  // MQA / GQA

    const int src_q_idx = token_idx * (n + 2 * kv_n) + hidden_idx;
    const int src_k_idx = token_idx * (n + 2 * kv_n) + hidden_idx + n;
    const int src_v_idx = token_idx * (n + 2 * kv_n) + hidden_idx + kv_n + n;

    Vec_type q = 0, k = 0, v = 0;
    if (active) {
        q = *reinterpret_cast<const Vec_type*>(&QKV[src_q_idx]);
        q = add(q, *reinterpret_cast<const Vec_type*>(&qkv_bias[hidden_idx]));
        if (head_idx < head_num_kv) {
            k = *reinterpret_cast<const Vec_type*>(&QKV[src_k_idx]);
            v = *reinterpret_cast<const Vec_type*>(&QKV[src_v_idx]);
            k = add(k, *reinterpret_cast<const Vec_type*>(&qkv_bias[hidden_idx + n]));
            v = add(v, *reinterpret_cast<const Vec_type*>(&qkv_bias[hidden_idx + n + kv_n]));
        }
    }

    const int position_id = position_ids[token_idx];
    normal_rope(q, reinterpret_cast<T*>(smem_), tidx, position_id, rope_dim, rope_base, rope_scale, active);
    if (head_idx < head_num_kv) {
        normal_rope(k, reinterpret_cast<T*>(smem_), tidx, position_id, rope_dim, rope_base, rope_scale, active);
    }

    if (active) {
        *reinterpret_cast<Vec_type*>(&QKV[src_q_idx]) = q;
        if (head_idx < head_num_kv) {
            *reinterpret_cast<Vec_type*>(&QKV[src_k_idx]) = k;
            *reinterpret_cast<Vec_type*>(&QKV[src_v_idx]) = v;
        }
    }
}

// QKV: device [token_num, (head_num + 2 * head_num_kv) * size_per_head] fp16, rotated and biased in place;
// qkv_bias: [(head_num + 2 * head_num_kv) * size_per_head]; position_ids: [token_num]. size_per_head and rope_dim
// even, rope_dim <= size_per_head.
template<typename T>
void invokeAddFusedQKVBiasRope(T*           QKV,
                               const T*     qkv_bias,
                               const int*   position_ids,
                               const int    token_num,
                               const int    head_num,
                               const int    head_num_kv,
                               const int    size_per_head,
                               const int    rope_dim,
                               const float  rope_base,
                               const float  rope_scale,
                               cudaStream_t stream) {
    dim3         block((size_per_head / Vec_t<T>::size + 31) / 32 * 32);
    dim3         grid(token_num, head_num);
    const size_t smem_size = 2 * rope_dim * sizeof(T);
    add_fusedQKV_bias_rope_kernel<T><<<grid, block, smem_size, stream>>>(
        QKV, qkv_bias, position_ids, head_num, head_num_kv, size_per_head, rope_dim, rope_base, rope_scale);
}

template void invokeAddFusedQKVBiasRope<half>(half*,
                                              const half*,
                                              const int*,
                                              const int,
                                              const int,
                                              const int,
                                              const int,
                                              const int,
                                              const float,
                                              const float,
                                              cudaStream_t);

}  // namespace rtp_llm
