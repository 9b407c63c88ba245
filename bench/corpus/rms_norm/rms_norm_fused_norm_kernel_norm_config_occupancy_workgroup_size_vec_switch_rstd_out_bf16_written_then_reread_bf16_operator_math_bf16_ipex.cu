// RMSNorm forward as Intel Extension for PyTorch writes it for its XPU backend (intel/intel-extension-for-pytorch,
// csrc/gpu/aten/operators/RMSNorm.cpp: RMSNormForward<scalar_t, mean_t, weight_t> with reduce_combine /
// reduce_project / update, run by Norm.h's fused_norm_kernel through launch_vectorized_fused_norm_kernel, sized by
// NormConfig), written in CUDA for the bf16 path (gamma in bf16, so mean_t = weight_t = scalar_t = bf16):
//   * one work-group (block) per row: RMSNormKernelImplInternal forces workgroup_num_foreach = 1, WGPlane = Plane;
//   * NormConfig's occupancy rule picks the work-group size from the row COUNT, not the row length: start from
//     the maximal work-group (1024) and total_resource / 1024 groups, and while twice as many groups still fit the
//     rows, double the groups and halve the group (not below one sub-group): 1024 threads for a few rows, 512 for
//     about a thousand, 64 for 8192;
//   * vec_size = 16 bytes / sizeof(bf16) = 8, halved while (vec_size / 2) * total_resource >= rows * cols (small
//     problems run scalar), capped by every pointer's alignment and halved until it divides the row; the host
//     switch instantiates the kernel for 8, 4, 2 or 1 (aligned_vector_loop<scalar_t, vec_size> loads and stores);
//   * reduce_combine: each work-item sums x^2 in fp32 over its vectors, the group reduce (reduce_over_group)
//     gives every work-item the total;
//   * reduce_project: work-item 0 writes rstd[row] = mean_t(rsqrt(sum < 0 ? 0 : sum / Plane + eps)) to the rstd
//     OUTPUT (in bf16, since gamma is bf16), then a barrier, and EVERY work-item reads rstd[row] back from global
//     memory: the normalization uses the rounded bf16 rstd;
//   * update: y = gamma * rstd * x in c10::BFloat16 arithmetic, each operator computing in fp32 and rounding to
//     bf16: y = bf16(bf16(gamma * rstd) * x), X read a second time from global memory.
// Changed to make it CUDA: the sub-group is a warp (SIMD 32 instead of 16, so the smallest group is 32), the group
// reduce is a xor butterfly plus shared warp sums, and the device limits IPEX queries (max work-group size, work
// items per tile) are constants (1024; 132 SMs x 2048 resident threads, an H100 / H200); only the bf16-gamma
// instantiation is built (a fp32 gamma makes IPEX keep rstd in fp32). Fixed: launch_vectorized_fused_norm_kernel's
// index-type switch instantiates uint32_t in BOTH branches, so group_id * Plane wraps for tensors of 2^32 elements
// or more; the row offset is 64-bit here.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

namespace normalization {

constexpr int SIMD = 32;                          // sub-group size (a CUDA warp)
constexpr int kMaxWorkGroupSize = 1024;           // dpcppMaxWorkGroupSize
constexpr int kMaxWorkItemsPerTile = 132 * 2048;  // dpcppMaxWorkItemsPerTile

template <typename T, int vec_size>
struct alignas(sizeof(T) * vec_size) aligned_vector_loop {
  T val[vec_size];
  __device__ __forceinline__ T& operator[](int i) { return val[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return val[i]; }
};

// c10::BFloat16 operator*: float product, rounded back to bf16
__device__ __forceinline__ __nv_bfloat16 bf16_mul(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16(__bfloat162float(a) * __bfloat162float(b));
}

// sycl::reduce_over_group(group, value, plus): every work-item gets the group's sum
__device__ __forceinline__ float reduce_over_group(float value, float* local_sum) {
  const int sg_local_id = threadIdx.x % SIMD;
  const int sg_id = threadIdx.x / SIMD;
  const int sub_group_num = (blockDim.x + SIMD - 1) / SIMD;
#pragma unroll
  for (int i = SIMD / 2; i > 0; i >>= 1) value += __shfl_xor_sync(0xffffffffu, value, i);
  if (sg_local_id == 0) local_sum[sg_id] = value;
  __syncthreads();
  value = 0.0f;
  for (int i = 0; i < sub_group_num; ++i) value += local_sum[i];
  return value;
}

/* kerntune:
args  = ["X_data: in bf16[M * N]", "Y_data: out bf16[M * N]", "var_data: out bf16[M]", "gamma_data: in bf16[N]",
         "eps: f32 = 1e-6", "Plane: i32 = N"]
sizes = [{ M = 8192, N = 4096 }, { M = 4, N = 4096 }, { M = 999, N = 3000 }]
grid  = "M"
# 264 = total_resource / 1024 groups to start with; the group halves each time the groups can double (to 32)
block = "1024 >> (min(1, M / 528) + min(1, M / 1056) + min(1, M / 2112) + min(1, M / 4224) + min(1, M / 8448))"
template_args = ["__nv_bfloat16", "__nv_bfloat16", "__nv_bfloat16", "8"]
*/
template <typename scalar_t, typename mean_t, typename weight_t, int vec_size>
__global__ void fused_norm_kernel(const scalar_t* X_data, scalar_t* Y_data, mean_t* var_data,
                                  const weight_t* gamma_data, float eps, int Plane) {
  using vec_t = aligned_vector_loop<scalar_t, vec_size>;
  using weight_vec_t = aligned_vector_loop<weight_t, vec_size>;
  __shared__ float local_sum[kMaxWorkGroupSize / SIMD];

  const int group_id = blockIdx.x;
  const int local_id = threadIdx.x;
  const int workgroup_size = blockDim.x;
  const int WGPlane = Plane;  // workgroup_num_foreach == 1, group_id_foreach == 0
  const int64_t group_offset = static_cast<int64_t>(group_id) * Plane;

  // reduce_combine
  float sum_value = 0.0f;
  for (int j = local_id * vec_size; j < WGPlane; j += workgroup_size * vec_size) {
    const int plane_offset = j;
    if (plane_offset < Plane) {
      const vec_t value = *reinterpret_cast<const vec_t*>(X_data + group_offset + plane_offset);
#pragma unroll
      for (int v = 0; v < vec_size; ++v) {
        const float xv = static_cast<float>(value[v]);
        sum_value += xv * xv;  // Numerics<accscalar_t>::pow(value[v], 2)
      }
    }
  }
  sum_value = reduce_over_group(sum_value, local_sum);

  // update: work-item 0 projects the sum to rstd, the others wait at the barrier and read it back
  if (local_id == 0) {
    const float scale = static_cast<float>(Plane);
    var_data[group_id] = static_cast<mean_t>(rsqrtf(sum_value < 0 ? 0.0f : sum_value / scale + eps));
  }
  __syncthreads();  // item_id.barrier(dpcpp_global_fence)

  const mean_t var_val = var_data[group_id];
  for (int j = local_id * vec_size; j < WGPlane; j += workgroup_size * vec_size) {
    const int plane_offset = j;
    if (plane_offset < Plane) {
      const vec_t X_val = *reinterpret_cast<const vec_t*>(X_data + group_offset + plane_offset);
      const weight_vec_t gamma_val = *reinterpret_cast<const weight_vec_t*>(gamma_data + plane_offset);
      vec_t Y_val;
#pragma unroll
      for (int v = 0; v < vec_size; ++v) {
        Y_val[v] = static_cast<scalar_t>(bf16_mul(bf16_mul(gamma_val[v], var_val), X_val[v]));
      }
      *reinterpret_cast<vec_t*>(Y_data + group_offset + plane_offset) = Y_val;
    }
  }
}

class NormConfig {
 public:
  NormConfig(int Batch, int Plane, int element_size_bytes)
      : Batch(Batch), Plane(Plane), element_size_bytes(element_size_bytes) {
    get_max_vec_size();
    get_workgroup_size();
    WGPlane = (Plane + workgroup_num_foreach - 1) / workgroup_num_foreach;
  }

  int Batch;
  int Plane;
  int WGPlane;
  int element_size_bytes;
  int max_vec_size;
  int workgroup_num;
  int workgroup_num_foreach;
  int workgroup_size;
  int sub_group_num;

  void get_max_vec_size() {
    const int total_resource = kMaxWorkItemsPerTile;
    constexpr int float4_size = sizeof(float) * 4;
    max_vec_size = float4_size / element_size_bytes;
    while ((max_vec_size >> 1) * static_cast<int64_t>(total_resource) >= static_cast<int64_t>(Batch) * Plane &&
           (max_vec_size >> 1) >= 1) {
      max_vec_size = max_vec_size >> 1;
    }
  }

  void get_workgroup_size() {
    const int max_workgroup_size = kMaxWorkGroupSize;
    const int total_resource = kMaxWorkItemsPerTile;
    workgroup_num = total_resource / max_workgroup_size;
    int max_workgroup_num_foreach = 1;
    workgroup_size = max_workgroup_size;

    // few rows: fewer groups, each row may be split over several groups
    while (workgroup_num > Batch) {
      workgroup_num = workgroup_num >> 1;
      max_workgroup_num_foreach = max_workgroup_num_foreach << 1;
    }
    workgroup_num_foreach = (Plane + workgroup_size * max_vec_size - 1) / (workgroup_size * max_vec_size);
    workgroup_num_foreach = std::min(workgroup_num_foreach, max_workgroup_num_foreach);
    // many rows: more, smaller groups
    while (workgroup_num << 1 <= Batch && (workgroup_size >> 1) >= SIMD) {
      workgroup_num = workgroup_num << 1;
      workgroup_size = workgroup_size >> 1;
    }
    workgroup_num = std::max(workgroup_num, Batch);
    sub_group_num = (workgroup_size + SIMD - 1) / SIMD;
  }
};

// at::native::Memory::can_vectorize_up_to: the widest vector (elements, at most 8) the address is aligned to
inline int can_vectorize_up_to(const void* ptr, int element_size_bytes) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  for (int vec_size = 8; vec_size > 1; vec_size >>= 1) {
    if (address % (vec_size * element_size_bytes) == 0) return vec_size;
  }
  return 1;
}

template <int vec_size>
static void fused_norm(const __nv_bfloat16* X, __nv_bfloat16* Y, __nv_bfloat16* rstd, const __nv_bfloat16* gamma,
                       float eps, const NormConfig& cfg, cudaStream_t stream) {
  fused_norm_kernel<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, vec_size>
      <<<cfg.workgroup_num, cfg.workgroup_size, 0, stream>>>(X, Y, rstd, gamma, eps, cfg.Plane);
}

}  // namespace normalization

// input, output: [M, N] bf16 contiguous; weight: [N] bf16; rstd: [M] bf16 (1 / sqrt(mean(x^2) + eps), rounded to
// bf16, as IPEX returns it for a bf16 weight). Device pointers.
void rms_norm_fw(const __nv_bfloat16* input, const __nv_bfloat16* weight, __nv_bfloat16* output,
                 __nv_bfloat16* rstd, int64_t M, int64_t N, double epsilon, cudaStream_t stream) {
  using namespace normalization;
  if (M == 0 || N == 0) return;
  NormConfig config(static_cast<int>(M), static_cast<int>(N), sizeof(__nv_bfloat16));
  // TODO (as upstream): force it to use fused_norm_kernel
  config.workgroup_num_foreach = 1;
  config.WGPlane = config.Plane;

  // get_update_vec_size
  int vec_size = config.max_vec_size;
  vec_size = std::min(vec_size, can_vectorize_up_to(input, sizeof(__nv_bfloat16)));
  vec_size = std::min(vec_size, can_vectorize_up_to(output, sizeof(__nv_bfloat16)));
  vec_size = std::min(vec_size, can_vectorize_up_to(weight, sizeof(__nv_bfloat16)));
  while (config.WGPlane % vec_size != 0) vec_size = vec_size >> 1;

  const float eps = static_cast<float>(epsilon);
  switch (vec_size) {
    case 8: fused_norm<8>(input, output, rstd, weight, eps, config, stream); break;
    case 4: fused_norm<4>(input, output, rstd, weight, eps, config, stream); break;
    case 2: fused_norm<2>(input, output, rstd, weight, eps, config, stream); break;
    default: fused_norm<1>(input, output, rstd, weight, eps, config, stream); break;
  }
}
