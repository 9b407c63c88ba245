// MoE finalize (un-permute and reduce) as ONNX Runtime's contrib MoE op runs it (contrib_ops/cuda/moe/ft_moe,
// carried over from FasterTransformer's moe_kernels.cu, finalize_moe_routing_kernel): after the grouped expert
// GEMMs the k expert outputs of each token sit in expert-sorted (permuted) rows; this gathers them back, adds the
// expert's second-GEMM bias, weights them by the router's scales and sums them onto the skip (residual) input:
//   out[r, c] = skip[r, c] + sum_{i < k} scales[r, i] * (rows[dest(r + i * num_rows), c] + bias[expert[r, i], c])
// with dest = expanded_source_row_to_expanded_dest_row (int32 [k * num_rows], the expanded source row i * num_rows
// + r to its permuted row) and expert = expert_for_source_row (int32 [num_rows, k]).
// All arithmetic in T = half with its operators (every add and multiply rounded to fp16), the accumulator
// thread_output a half; the bias nullable.
// ORT's shape: template <typename T, int RESIDUAL_NUM> (0, 1 or 2 skip inputs; the launcher picks 1 when a skip is
// given), one block per token with num_rows = gridDim.x, threads = min(cols, 1024) striding the columns, scalar
// loads through the gathered row pointer.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

namespace ort_fastertransformer {

// Default fp16 tolerance: k = 2 or 8 rounded fp16 multiply-adds of O(1) values; a rewrite that keeps the half
// accumulator matches exactly, one that accumulates in fp32 differs by a few fp16 ulps.
/* kerntune:
args  = ["expanded_permuted_rows: in f16[num_rows * k * cols]", "reduced_unpermuted_output: out f16[num_rows * cols]",
         "skip_1: in f16[num_rows * cols]", "bias: in f16[num_experts * cols]",
         "scales: in f16[num_rows * k] ~ uniform(0, 1)",
         "expanded_source_row_to_expanded_dest_row: in i32[num_rows * k] ~ randint(0, num_rows * k)",
         "expert_for_source_row: in i32[num_rows * k] ~ randint(0, num_experts)", "cols: i32 = cols", "k: i32 = k"]
sizes = [{ num_rows = 4096, k = 2, cols = 4096, num_experts = 8 }, { num_rows = 4, k = 8, cols = 2048, num_experts = 64 },
         { num_rows = 37, k = 2, cols = 1000, num_experts = 16 }]
grid  = "num_rows"
block = "min(cols, 1024)"
template_args = ["half", "1"]
*/
template <typename T, int RESIDUAL_NUM>
__global__ void finalize_moe_routing_kernel(const T* expanded_permuted_rows, T* reduced_unpermuted_output,
                                            const T* skip_1, const T* bias, const T* scales,
                                            const int* expanded_source_row_to_expanded_dest_row,
                                            const int* expert_for_source_row, const int cols, const int k) {
  const int original_row = blockIdx.x;
  const int num_rows = gridDim.x;
  T* reduced_row_ptr = reduced_unpermuted_output + static_cast<int64_t>(original_row) * cols;
  const T* skip_1_row_ptr = nullptr;
  if (RESIDUAL_NUM == 1) {
    skip_1_row_ptr = skip_1 + static_cast<int64_t>(original_row) * cols;
  }

  for (int tid = threadIdx.x; tid < cols; tid += blockDim.x) {
    T thread_output;
    if (RESIDUAL_NUM == 0) {
      thread_output = T(0);
    } else {
      thread_output = skip_1_row_ptr[tid];
    }
    for (int k_idx = 0; k_idx < k; ++k_idx) {
      const int expanded_original_row = original_row + k_idx * num_rows;
      const int expanded_permuted_row = expanded_source_row_to_expanded_dest_row[expanded_original_row];

      const int64_t k_offset = static_cast<int64_t>(original_row) * k + k_idx;
      const T row_scale = scales[k_offset];
      const T* expanded_permuted_rows_row_ptr =
          expanded_permuted_rows + static_cast<int64_t>(expanded_permuted_row) * cols;

      const int expert_idx = expert_for_source_row[k_offset];
      const T bias_value = bias == nullptr ? T(0) : bias[static_cast<int64_t>(expert_idx) * cols + tid];

      thread_output = thread_output + row_scale * (expanded_permuted_rows_row_ptr[tid] + bias_value);
    }
    reduced_row_ptr[tid] = thread_output;
  }
}

// Device pointers; skip may be null (no residual), bias may be null.
template <typename T>
void finalize_moe_routing_kernelLauncher(const T* expanded_permuted_rows, T* reduced_unpermuted_output,
                                         const T* skip, const T* bias, const T* scales,
                                         const int* expanded_source_row_to_expanded_dest_row,
                                         const int* expert_for_source_row, const int num_rows, const int cols,
                                         const int k, cudaStream_t stream) {
  if (num_rows == 0) return;
  const int blocks = num_rows;
  const int threads = std::min(cols, 1024);
  if (skip == nullptr) {
    finalize_moe_routing_kernel<T, 0><<<blocks, threads, 0, stream>>>(
        expanded_permuted_rows, reduced_unpermuted_output, skip, bias, scales,
        expanded_source_row_to_expanded_dest_row, expert_for_source_row, cols, k);
  } else {
    finalize_moe_routing_kernel<T, 1><<<blocks, threads, 0, stream>>>(
        expanded_permuted_rows, reduced_unpermuted_output, skip, bias, scales,
        expanded_source_row_to_expanded_dest_row, expert_for_source_row, cols, k);
  }
}

template void finalize_moe_routing_kernelLauncher(const half*, half*, const half*, const half*, const half*,
                                                  const int*, const int*, const int, const int, const int,
                                                  cudaStream_t);

}  // namespace ort_fastertransformer
