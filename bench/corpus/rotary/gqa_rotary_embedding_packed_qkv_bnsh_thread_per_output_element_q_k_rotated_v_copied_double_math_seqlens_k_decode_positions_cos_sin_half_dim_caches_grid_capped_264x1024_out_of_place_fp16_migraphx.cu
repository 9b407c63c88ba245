// Rotary embedding in the style of MIGraphX (ROCm/AMDMIGraphX, src/targets/gpu/kernels/include/migraphx/kernels/
// gqa_rotary_embedding.hpp: gqa_rotary_embedding / run_rotary_embedding / pack_v_into_rotary_qkv, compiled by
// gqa_rotary_embedding_compiler in src/targets/gpu/jit/gqa_rotary_embedding.cpp with the parameters of
// init_params in src/targets/gpu/include/migraphx/gpu/group_query_attention.hpp; MIGraphX is AMD's graph compiler
// and inference engine for ONNX models, and this is the rotary step of its lowering of ONNX Runtime's
// GroupQueryAttention contrib op), ported from HIP to CUDA:
//   query: the PACKED QKV projection already transposed to BNSH, [batch, num_heads + 2 * kv_num_heads, seq, head]
//   (the q heads, then the k heads, then the v heads of each batch: seq_stride = head_size, head_stride =
//   seq * head_size, batch_stride = (num_heads + 2 * kv_num_heads) * head_stride); output the same shape, OUT OF
//   PLACE, q and k rotated and V COPIED THROUGH so that the output is the whole rotated QKV;
//   cos_cache, sin_cache [max_pos, rotary_dim / 2] in the activation type; seqlens_k int32 [batch] (ONNX Runtime's
//   total length - 1) serve as the positions: position_ids_format = 1 for a decode step (seq == 1), position =
//   seqlens_k[b * seq + s]; for a prompt (format 0) the position is s;
//   ONE THREAD PER OUTPUT ELEMENT of the packed tensor through a global-stride loop over its element count: the
//   flat index is split into the q chunk, the k chunk and the v chunk, then into (b, s, n) = ((i / heads) / seq,
//   (i / heads) % seq, i % heads) and the column ii (consecutive threads walk the columns, then the heads of one
//   token, although the heads are seq * head_size apart in memory);
//   rotation per element in DOUBLE precision: NeoX halves (j = (ii + half) % rotary_dim, sign -1 below the half,
//   +1 above) or, when interleaved, GPT-J pairs (j = ii ^ 1, sign -1 on even ii), out = x[ii] * cos[c] +
//   sign * x[j] * sin[c] with c = ii % half (ii / 2 for pairs), one rounding from double to fp16; columns at or
//   past rotary_dim copied (partial rotary); 32-bit (index_int) indices as MIGraphX has them;
//   launch as compute_global_for sizes it: the default local size 1024, min(cdiv(elements, 1024),
//   max_global / 1024) blocks, max_global = CUs x work-items per CU (132 x 2048: 264 blocks of 1024).
// No bug found. Changed: the gqa parameters, compile-time constants of the generated kernel
// (MIGRAPHX_MAKE_CONSTANT), are kernel arguments (max_sequence_length and seqlen_present_kv_cache, unused by this
// kernel, dropped; the interleaved bool an int); the JIT compile and tensor views became a templated C++ launcher
// with device pointers, sizes and a stream (fp16 and bf16 instantiated); the device query is the constants 132 and
// 2048 (H100 / H200).
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace migraphx {

using index_int = uint32_t;

constexpr size_t kCuCount = 132;
constexpr size_t kMaxWorkitemsPerCu = 2048;
constexpr size_t kMaxGlobal = kCuCount * kMaxWorkitemsPerCu;

struct gqa_parameters {
  index_int batch_size;            // batch size of the input
  index_int sequence_length;       // sequence length of the input
  index_int head_size;             // head size
  index_int rotary_embedding_dim;  // rotary embedding dimension
  index_int num_heads;             // query heads
  index_int head_stride;           // head stride
  index_int seq_stride;            // sequence stride
  index_int batch_stride;          // batch stride
  index_int position_ids_format;   // 0: one start position, 1: (batch_size, sequence_length) positions
  index_int kv_num_heads;          // key / value heads
  bool interleaved;                // GPT-J pairs instead of NeoX halves
};

__device__ __forceinline__ double to_double(__half x) { return (double)__half2float(x); }
__device__ __forceinline__ double to_double(__nv_bfloat16 x) { return (double)__bfloat162float(x); }
__device__ __forceinline__ void assign(__half& y, double x) { y = __double2half(x); }
__device__ __forceinline__ void assign(__nv_bfloat16& y, double x) { y = __double2bfloat16(x); }

template <class T, class PosIDs>
__device__ void run_rotary_embedding(const T* input, const T* cos_cache, const T* sin_cache, T* output,
                                     PosIDs pos_ids, const gqa_parameters& params, index_int idx,
                                     bool is_query = false) {
  const index_int batch_size = params.batch_size;
  const index_int sequence_length = params.sequence_length;
  const index_int n_heads = is_query ? params.num_heads : params.kv_num_heads;
  const index_int head_size = params.head_size;
  const index_int head_stride = params.head_stride;
  const index_int seq_stride = params.seq_stride;
  const index_int batch_stride = params.batch_stride;
  const int position_ids_format = params.position_ids_format;
  const index_int rotary_emb_dim = params.rotary_embedding_dim;
  const index_int half_rotary_emb_dim = rotary_emb_dim / 2;

  const index_int loop_len = batch_size * sequence_length * n_heads;
  const index_int i = idx / head_size;  // (b, s, n) flattened, n fastest
  const index_int ii = idx % head_size;
  if (i < loop_len) {
    const index_int b = (i / n_heads) / sequence_length;
    const index_int s = (i / n_heads) % sequence_length;
    const index_int n = i % n_heads;
    const index_int block_offset = b * batch_stride + s * seq_stride + n * head_stride;
    const T* input_data = input + block_offset;
    T* output_data = output + block_offset;

    // the caches are (max_pos, rotary_dim / 2)
    int position_id = (position_ids_format == 0) ? static_cast<int>(pos_ids[0]) + s
                                                 : static_cast<int>(pos_ids[b * sequence_length + s]);
    position_id = (sequence_length == 1) ? position_id : s;

    const index_int cache_offset = position_id * half_rotary_emb_dim;
    const T* cos_data = cos_cache + cache_offset;
    const T* sin_data = sin_cache + cache_offset;

    if (ii < rotary_emb_dim) {
      index_int cache_idx;
      double sign;
      index_int j;
      if (params.interleaved) {
        cache_idx = (ii / 2) % half_rotary_emb_dim;
        sign = (ii % 2 == 0) ? -1.0 : 1.0;
        j = (ii % 2 == 0) ? ii + 1 : ii - 1;
      } else {
        cache_idx = ii % half_rotary_emb_dim;
        sign = (ii < half_rotary_emb_dim) ? -1.0 : 1.0;
        j = (ii + half_rotary_emb_dim) % rotary_emb_dim;
      }
      const double out_data = to_double(input_data[ii]) * to_double(cos_data[cache_idx]) +
                              sign * to_double(input_data[j]) * to_double(sin_data[cache_idx]);
      assign(output_data[ii], out_data);
    } else if (ii < head_size) {
      output_data[ii] = input_data[ii];  // past the rotary dimension: copied
    }
  }
}

template <class T>
__device__ void pack_v_into_rotary_qkv(const gqa_parameters& params, const T* input, T* output, index_int idx) {
  const index_int loop_len = params.batch_size * params.sequence_length * params.kv_num_heads;
  const index_int i = idx / params.head_size;
  const index_int ii = idx % params.head_size;
  if (i < loop_len) {
    const index_int b = (i / params.kv_num_heads) / params.sequence_length;
    const index_int s = (i / params.kv_num_heads) % params.sequence_length;
    const index_int n = i % params.kv_num_heads;
    const index_int block_offset = b * params.batch_stride + s * params.seq_stride + n * params.head_stride;
    if (ii < params.head_size) output[block_offset + ii] = input[block_offset + ii];
  }
}

/* kerntune:
args  = ["query: in f16[B * (HQ + 2 * HKV) * S * H]", "seqlens_k: in i32[B] ~ randint(0, M)",
         "cos_cache: in f16[M * R / 2] ~ uniform(-1, 1)", "sin_cache: in f16[M * R / 2] ~ uniform(-1, 1)",
         "output: out f16[B * (HQ + 2 * HKV) * S * H]", "batch_size: u32 = B", "sequence_length: u32 = S",
         "head_size: u32 = H", "rotary_embedding_dim: u32 = R", "num_heads: u32 = HQ", "head_stride: u32 = S * H",
         "seq_stride: u32 = H", "batch_stride: u32 = (HQ + 2 * HKV) * S * H",
         "position_ids_format: u32 = 1 - min(S - 1, 1)", "kv_num_heads: u32 = HKV", "interleaved: i32 = 0"]
sizes = [{ B = 1, S = 8192, HQ = 32, HKV = 8, H = 128, R = 128, M = 8192 },
         { B = 16, S = 1, HQ = 32, HKV = 8, H = 128, R = 128, M = 4096 },
         { B = 3, S = 999, HQ = 32, HKV = 32, H = 80, R = 32, M = 999 }]
grid  = "min(264, cdiv(B * (HQ + 2 * HKV) * S * H, 1024))"
block = 1024
template_args = ["__half"]
*/
template <typename T>
__global__ void gqa_rotary_embedding_kernel(const T* query, const int32_t* seqlens_k, const T* cos_cache,
                                            const T* sin_cache, T* output, index_int batch_size,
                                            index_int sequence_length, index_int head_size,
                                            index_int rotary_embedding_dim, index_int num_heads,
                                            index_int head_stride, index_int seq_stride, index_int batch_stride,
                                            index_int position_ids_format, index_int kv_num_heads, int interleaved) {
  const gqa_parameters params{batch_size,   sequence_length, head_size,           rotary_embedding_dim,
                              num_heads,    head_stride,     seq_stride,          batch_stride,
                              position_ids_format, kv_num_heads, interleaved != 0};
  const index_int elements =
      params.batch_size * (params.num_heads + 2 * params.kv_num_heads) * params.sequence_length * params.head_size;

  const T* q_input = query;
  T* q_rotary = output;
  const T* k_input = q_input + params.num_heads * params.sequence_length * params.head_size;
  T* k_rotary = q_rotary + params.num_heads * params.sequence_length * params.head_size;
  const T* v_input = k_input + params.kv_num_heads * params.sequence_length * params.head_size;
  T* v_rotary = k_rotary + params.kv_num_heads * params.sequence_length * params.head_size;
  const index_int q_chunk_size = params.batch_size * params.num_heads * params.sequence_length * params.head_size;
  const index_int kv_chunk_size =
      params.batch_size * params.kv_num_heads * params.sequence_length * params.head_size;

  // ind.global_stride(output elements)
  for (index_int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < elements; idx += gridDim.x * blockDim.x) {
    if (idx < q_chunk_size) {
      run_rotary_embedding(q_input, cos_cache, sin_cache, q_rotary, seqlens_k, params, idx, true);
    } else if (idx < q_chunk_size + kv_chunk_size) {
      run_rotary_embedding(k_input, cos_cache, sin_cache, k_rotary, seqlens_k, params, idx - q_chunk_size);
    } else if (idx < elements) {
      pack_v_into_rotary_qkv(params, v_input, v_rotary, idx - (q_chunk_size + kv_chunk_size));
    }
  }
}

}  // namespace migraphx

// packed_qkv, output: device [batch, num_heads + 2 * kv_num_heads, seq, head_size]; seqlens_k: device int32
// [batch]; cos_cache, sin_cache: device [max_pos, rotary_dim / 2].
template <typename T>
void gqa_rotary_embedding(const T* packed_qkv, const int32_t* seqlens_k, const T* cos_cache, const T* sin_cache,
                          T* output, int batch_size, int num_heads, int kv_num_heads, int sequence_length,
                          int head_size, int rotary_dim, bool interleaved, cudaStream_t stream) {
  using migraphx::index_int;
  // init_params
  const index_int seq_stride = head_size;
  const index_int head_stride = sequence_length * seq_stride;
  const index_int batch_stride = (num_heads + 2 * kv_num_heads) * head_stride;
  const index_int position_ids_format = sequence_length == 1 ? 1 : 0;

  // compute_global_for(ctx, output elements) with the default local size
  const size_t elements = (size_t)batch_size * (num_heads + 2 * kv_num_heads) * sequence_length * head_size;
  if (elements == 0) return;
  const size_t local = 1024;
  const size_t groups = (elements - 1) / local + 1;
  const size_t max_blocks = migraphx::kMaxGlobal / local;
  const size_t nblocks = groups < max_blocks ? groups : max_blocks;

  migraphx::gqa_rotary_embedding_kernel<T><<<dim3(nblocks), dim3(local), 0, stream>>>(
      packed_qkv, seqlens_k, cos_cache, sin_cache, output, batch_size, sequence_length, head_size, rotary_dim,
      num_heads, head_stride, seq_stride, batch_stride, position_ids_format, kv_num_heads, interleaved ? 1 : 0);
}

template void gqa_rotary_embedding<__half>(const __half*, const int32_t*, const __half*, const __half*, __half*, int,
                                           int, int, int, int, int, bool, cudaStream_t);
template void gqa_rotary_embedding<__nv_bfloat16>(const __nv_bfloat16*, const int32_t*, const __nv_bfloat16*,
                                                  const __nv_bfloat16*, __nv_bfloat16*, int, int, int, int, int,
                                                  int, bool, cudaStream_t);
