// Per-token, per-128-block FP8 (e4m3) quantization in the style of Baidu FastDeploy (custom_ops/gpu_ops/
// per_token_quant_fp8.cu: quant_per_token_per_block<T> behind PerTokenQuant, the activation side of its block-wise
// FP8 linear and MoE layers, DeepSeek-V3 style 1 x 128 scales), bf16 in:
//   input [token_num, hidden_size] bf16, quanted_res [token_num, hidden_size] fp8 e4m3 (bytes), quanted_scale
//   [token_num, hidden_size_scale] f32 ROW-MAJOR (token-major), hidden_size_scale = ceil(hidden_size / 128): the
//   last block of a row may be partial (FastDeploy: "use ceil_div" for moe_intermediate_size 448)
//   blocks stride over tokens (grid = min(132 * 8, token_num)); inside a token, WARP PER 128-BLOCK: warps stride over
//   the blocks, each lane loads one 4-wide AlignedVector (8 bytes), lanes past the row end load zeros and store
//   nothing; per-lane |x| max seeded with -5e4, __shfl_down_sync tree to lane 0 then __shfl_sync broadcast,
//   max(amax, 1e-10), optional "finegrained range" (amax * 7, an environment switch in FastDeploy, off here),
//   scale = amax / 448 stored by lane 0, q = fp8(x * 448 / amax) (multiply, then divide; no clamp needed)
//   block = min(1024, hidden_size / 128 * 32): the FLOOR of the block count, so with a partial last block one warp
//   does two blocks; int indices, phi::dtype::float8_e4m3fn written as __nv_fp8_e4m3, paddle::bfloat16 as
//   __nv_bfloat16, the Paddle op replaced by a plain launcher with a stream
// The kernel needs hidden_size % 4 == 0 (a lane's 4-vector is either wholly inside the row or wholly past it) and
// hidden_size >= 128 (else the block would have 0 threads); the launcher asserts both. No other bug found.
#include <assert.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <algorithm>

constexpr float epsilon = 1e-10;

template <typename T, int Size>
struct alignas(sizeof(T) * Size) AlignedVector {
  T val[Size];
  __host__ __device__ inline const T& operator[](int i) const { return val[i]; }
  __host__ __device__ inline T& operator[](int i) { return val[i]; }
};

template <typename T, int Size>
__device__ inline void Load(const T* addr, AlignedVector<T, Size>* vec) {
  const AlignedVector<T, Size>* addr_vec = reinterpret_cast<const AlignedVector<T, Size>*>(addr);
  *vec = *addr_vec;
}

template <typename T, int Size>
__device__ inline void Store(const AlignedVector<T, Size>& vec, T* addr) {
  AlignedVector<T, Size>* addr_vec = reinterpret_cast<AlignedVector<T, Size>*>(addr);
  *addr_vec = vec;
}

/* kerntune:
args  = ["input: in bf16[tokens * hidden]", "quanted_res: out u8[tokens * hidden]",
         "quanted_scale: out f32[tokens * cdiv(hidden, 128)]", "token_num: i32 = tokens", "hidden_size: i32 = hidden",
         "hidden_size_scale: i32 = cdiv(hidden, 128)", "use_finegrained_range: u8 = 0"]
sizes = [{ tokens = 8192, hidden = 7168 }, { tokens = 4, hidden = 7168 }, { tokens = 999, hidden = 2880 }]
grid  = "min(1056, tokens)"
block = "min(1024, (hidden - hidden % 128) / 128 * 32)"
template_args = ["__nv_bfloat16"]
*/
template <typename T>
__global__ void quant_per_token_per_block(const T *input,
                                          __nv_fp8_e4m3 *quanted_res,
                                          float *quanted_scale,
                                          const int token_num,
                                          const int hidden_size,
                                          const int hidden_size_scale,
                                          const bool use_finegrained_range) {
  const int bid = blockIdx.x;
  const int tid = threadIdx.x;
  const int warp_id = tid / 32;
  const int lane_id = tid % 32;
  const int num_warp = blockDim.x / 32;
  static constexpr int NUM_PER_THREADS = 128 / 32;  // 4
  static constexpr float MAX_VALUE = 448.f;
  // ceil: the last 128-block of a row may be partial
  const int end_iter = (hidden_size + 127) / 128;
  AlignedVector<T, NUM_PER_THREADS> load_vec;
  AlignedVector<float, NUM_PER_THREADS> load_vec_float;
  AlignedVector<__nv_fp8_e4m3, NUM_PER_THREADS> res_vec;
  for (int token_idx = bid; token_idx < token_num; token_idx += gridDim.x) {
    const T *input_now = input + token_idx * hidden_size;
    __nv_fp8_e4m3 *quanted_res_now = quanted_res + token_idx * hidden_size;
    float *quanted_scale_now = quanted_scale + token_idx * hidden_size_scale;
    // one 128-block per warp
    for (int iter = warp_id; iter < end_iter; iter += num_warp) {
      const int start_offset = iter * 128;
      const bool is_valid_data = start_offset + lane_id * NUM_PER_THREADS < hidden_size;

      if (is_valid_data) {
        Load<T, NUM_PER_THREADS>(input_now + start_offset + lane_id * NUM_PER_THREADS, &load_vec);
      } else {
#pragma unroll
        for (int vid = 0; vid < NUM_PER_THREADS; vid++) load_vec[vid] = T(0.f);
      }
      // the lane's max
      float max_value_thread = -5e4;
#pragma unroll
      for (int vid = 0; vid < NUM_PER_THREADS; vid++) {
        load_vec_float[vid] = static_cast<float>(load_vec[vid]);
        max_value_thread = max(abs(load_vec_float[vid]), max_value_thread);
      }
      // the warp's max, in lane 0
      max_value_thread = max(__shfl_down_sync(0xffffffff, max_value_thread, 16), max_value_thread);
      max_value_thread = max(__shfl_down_sync(0xffffffff, max_value_thread, 8), max_value_thread);
      max_value_thread = max(__shfl_down_sync(0xffffffff, max_value_thread, 4), max_value_thread);
      max_value_thread = max(__shfl_down_sync(0xffffffff, max_value_thread, 2), max_value_thread);
      max_value_thread = max(__shfl_down_sync(0xffffffff, max_value_thread, 1), max_value_thread);
      // broadcast
      max_value_thread = __shfl_sync(0xFFFFFFFF, max_value_thread, 0);
      max_value_thread = max(max_value_thread, epsilon);

      if (use_finegrained_range) {
        max_value_thread *= 7.0f;
      }

      float scale_to_store = max_value_thread / MAX_VALUE;
      // quantize
#pragma unroll
      for (int vid = 0; vid < NUM_PER_THREADS; vid++) {
        res_vec[vid] = static_cast<__nv_fp8_e4m3>(load_vec_float[vid] * MAX_VALUE / max_value_thread);
      }
      // store
      if (is_valid_data)
        Store<__nv_fp8_e4m3, NUM_PER_THREADS>(res_vec, quanted_res_now + start_offset + lane_id * NUM_PER_THREADS);
      if (lane_id == 0) {
        quanted_scale_now[iter] = scale_to_store;
      }
    }
  }
}

// input: device [token_num, hidden_size] bf16; quanted_x: [token_num, hidden_size] fp8;
// quanted_scale: [token_num, ceil(hidden_size / block_size)] f32. block_size must be 128 (the kernel's block).
void PerTokenQuant(const __nv_bfloat16 *input, __nv_fp8_e4m3 *quanted_x, float *quanted_scale, const int token_num,
                   const int hidden_size, const int block_size, cudaStream_t stream) {
  assert(block_size == 128 && hidden_size % 4 == 0 && hidden_size >= 128);
  const int hidden_size_scale = (hidden_size + block_size - 1) / block_size;
  const int gridx = std::min(132 * 8, token_num);
  const int blockx = std::min(1024, hidden_size / 128 * 32);
  const bool use_finegrained_range = false;
  quant_per_token_per_block<<<gridx, blockx, 0, stream>>>(input, quanted_x, quanted_scale, token_num, hidden_size,
                                                          hidden_size_scale, use_finegrained_range);
}
