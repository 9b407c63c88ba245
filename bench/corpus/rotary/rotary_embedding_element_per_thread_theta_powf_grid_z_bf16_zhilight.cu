// Rotary embedding as Zhihu's ZhiLight serving engine writes its plain NeoX path (src/nn/position/
// rotary_embedding.cu, KERNEL_rotary_embedding<T, IsDynamic> behind RotaryEmbedding::impl::NormalImpl::rotate), bf16:
// ONE OUTPUT ELEMENT per thread over the token's whole hidden row (dim_model = num_heads * dim_head), no cos / sin
// cache: each thread computes its own angle
//   col = ith % dim_head, j = col mod half_dim,  freq = pos * powf(rope_theta, -float(j * 2) / dim_head)
//   out[col]  = in[col] * T(cos(freq)) - in[col + half_dim] * T(sin(freq))     (col < half_dim)
//   out[col]  = in[col] * T(cos(freq)) + in[col - half_dim] * T(sin(freq))     (col >= half_dim)
// with cos / sin rounded to the storage type and the products and the sum taken in T's operators (bf16 arithmetic,
// every step rounded), out of place. ZhiLight's conventions: argument order (dim_model, dim_head, hidden_stride,
// pos_stride, pos, in, out, rope_theta, max_position_embeddings, scaling_factor), size_t strides (0 for a 2-D q or a
// 1-D pos), int32 positions [batch, seq_len]; gridDim (seq_len, batch, ceil(dim_model / threads)) with
// threads = min(1024, round_up(dim_model, 32)), the column over blockIdx.z * blockDim.x + threadIdx.x; a template bool
// IsDynamic (dynamic-NTK theta rescaling from the last position; spec: false) picked at run time through a function
// pointer `kernel` launched with <<< >>>; q and k are rotated by two calls of rotate (one here).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

template <typename T, typename Tb>
inline T round_up(T m, Tb d) {
    return ((m + T(d) - 1) / T(d)) * T(d);
}

namespace nn {

/* kerntune:
args  = ["dim_model: i32 = num_heads * dim_head", "dim_head: i32 = dim_head",
         "hidden_stride: u64 = seq_len * num_heads * dim_head", "pos_stride: u64 = seq_len",
         "pos: in i32[batch * seq_len] ~ randint(0, 8192)",
         "in: in bf16[batch * seq_len * num_heads * dim_head]", "out: out bf16[batch * seq_len * num_heads * dim_head]",
         "rope_theta: f32 = 10000.0", "max_position_embeddings: i32 = 8192", "scaling_factor: f32 = 1.0"]
sizes = [{ batch = 2, seq_len = 4096, num_heads = 32, dim_head = 128 },
         { batch = 4, seq_len = 1, num_heads = 32, dim_head = 128 },
         { batch = 3, seq_len = 333, num_heads = 14, dim_head = 80 }]
grid  = ["seq_len", "batch", "cdiv(num_heads * dim_head, min(1024, round_up(num_heads * dim_head, 32)))"]
block = "min(1024, round_up(num_heads * dim_head, 32))"
template_args = ["nv_bfloat16", "false"]
*/
// gridDim (seq_len, batch, dim_model / 1024),   blockDim (1024, 1, 1)
template <typename T, bool IsDynamic = false>
static __global__ void KERNEL_rotary_embedding(
    int dim_model,
    int dim_head,  // dim_model = (num_head, dim_head)
    size_t hidden_stride,
    size_t pos_stride,
    const int32_t* __restrict__ pos,  // (batch, seq_len)
    const T* __restrict__ in,         // (batch, seq_len, dim_model)
    T* __restrict__ out,              // (batch, seq_len, dim_model)
    float rope_theta,
    int max_position_embeddings,
    float scaling_factor) {
    int batch_id = blockIdx.y;
    int target_pos = pos[batch_id * pos_stride + blockIdx.x];
    int ith = blockIdx.z * blockDim.x + threadIdx.x;
    int col = ith % dim_head;
    size_t offset = batch_id * hidden_stride + blockIdx.x * dim_model;

    if constexpr (IsDynamic) {
        // dynamic NTK: stretch theta once the sequence outgrows the trained context
        int seq_len = pos[batch_id * pos_stride + gridDim.x - 1];
        if (seq_len > max_position_embeddings) {
            rope_theta *= powf((scaling_factor * seq_len / max_position_embeddings) - (scaling_factor - 1.f),
                               dim_head / (dim_head - 2));
        }
    }
    if (ith >= dim_model)
        return;
    int half_dim = dim_head / 2;
    if (col < half_dim) {
        float freq = target_pos * powf(rope_theta, -float(col * 2) / dim_head);
        float cos_freq = cos(freq);
        float sin_freq = sin(freq);
        out[offset + ith] = in[offset + ith] * T(cos_freq) - in[offset + ith + half_dim] * T(sin_freq);
    } else {
        float freq = target_pos * powf(rope_theta, -float((col - half_dim) * 2) / dim_head);
        float cos_freq = cos(freq);
        float sin_freq = sin(freq);
        out[offset + ith] = in[offset + ith] * T(cos_freq) + in[offset + ith - half_dim] * T(sin_freq);
    }
}

enum class DataType { kFloat, kHalf, kBFloat16 };

// q (batch, seq_len, dim_model) -> out_q, pos (batch, seq_len) int32, NeoX pairs within each head of dim_head;
// device pointers; rope_scaling_type "dynamic" selects the dynamic-NTK instantiation.
void rotate(const int32_t* pos, const void* q, void* out_q, DataType dtype, int batch, int seq_len, int dim_model,
            int dim_head, float rope_theta, const std::string& rope_scaling_type, int max_position_embeddings,
            float scaling_factor, cudaStream_t stream) {
    if (dim_model % dim_head != 0) throw std::invalid_argument("dim_model mismatch");
    int pos_stride = seq_len;
    size_t hidden_stride = size_t(seq_len) * dim_model;
    int threads = std::min(1024, round_up(dim_model, 32));
    dim3 gridDim(seq_len, batch, round_up(dim_model, threads) / threads);
    dim3 blockDim(threads, 1, 1);
    if (dtype == DataType::kBFloat16) {
        auto kernel = KERNEL_rotary_embedding<nv_bfloat16, /*IsDynamic=*/false>;
        if (rope_scaling_type == "dynamic") {
            kernel = KERNEL_rotary_embedding<nv_bfloat16, /*IsDynamic=*/true>;
        }
        kernel<<<gridDim, blockDim, 0, stream>>>(dim_model, dim_head, hidden_stride, pos_stride, pos,
                                                 static_cast<const nv_bfloat16*>(q), static_cast<nv_bfloat16*>(out_q),
                                                 rope_theta, max_position_embeddings, scaling_factor);
    } else if (dtype == DataType::kHalf) {
        auto kernel = KERNEL_rotary_embedding<half, /*IsDynamic=*/false>;
        if (rope_scaling_type == "dynamic") {
            kernel = KERNEL_rotary_embedding<half, /*IsDynamic=*/true>;
        }
        kernel<<<gridDim, blockDim, 0, stream>>>(dim_model, dim_head, hidden_stride, pos_stride, pos,
                                                 static_cast<const half*>(q), static_cast<half*>(out_q), rope_theta,
                                                 max_position_embeddings, scaling_factor);
    } else {
        throw std::invalid_argument("rotary embedding: dtype");
    }
}

}  // namespace nn
