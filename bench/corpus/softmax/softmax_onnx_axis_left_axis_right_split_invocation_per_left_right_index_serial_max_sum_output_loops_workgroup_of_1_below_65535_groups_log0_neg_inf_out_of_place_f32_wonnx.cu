// ONNX Softmax in the style of wonnx (webonnx/wonnx, wonnx/templates/endomorphism/softmax.wgsl, compiled by the
// "Softmax" arm of wonnx/src/compiler.rs; wonnx is a WebGPU ONNX runtime written in Rust whose operators are WGSL
// compute shaders rendered from Tera templates), ported from WGSL to CUDA:
//   The input is viewed as [left_of_axis, axis_dims, right_of_axis] (ONNX opset 13: softmax along `axis` only; opset
//   < 11: the whole chunk right of `axis` is one softmax). ONE INVOCATION PER (left, right) INDEX walks its softmax
//   serially, three times, with stride right_of_axis: max (starting from log(0) = -inf, WGSL having no -Infinity
//   literal), sum of exp(x - max), then output = exp(x - max) / sum. fp32 (wonnx's Scalar), out of place.
//   Launch as compiler.rs sizes it: workgroup_size(x, 65535, 256) gives (x workgroups of ONE invocation) while x fits
//   in the 65535 workgroups of a dimension, otherwise a workgroup of ceil(x / 65535) invocations and ceil(x / that)
//   workgroups; the same for y over right_of_axis. So a last-axis softmax of up to 65535 rows is 1-thread blocks.
// Fixed: the shader has no bounds check; when left_of_axis (or right_of_axis) exceeds 65535 and the chosen workgroup
// size does not divide it (70001 rows: 35001 workgroups of 2), the last workgroup's extra invocation walks a row past
// the tensor (WebGPU's robust buffer access clamps or drops those accesses, possibly onto the last real elements; a
// CUDA port reads and writes out of bounds). A guard on both indices is added.
// Changed: the Tera constants ({{ axis_chunk }}, {{ axis_dims }}, {{ right_of_axis_chunk }}) baked into each
// rendered shader are kernel arguments here, plus left_of_axis / right_of_axis for the guard; the compiler.rs
// node setup became a C++ launcher with device pointers, the input shape, axis, opset and a stream.
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <vector>
#include <cuda_runtime.h>

namespace wonnx {

constexpr uint32_t MAX_COMPUTE_WORKGROUPS_PER_DIMENSION = 65535;
constexpr uint32_t MAX_WORKGROUP_SIZE_X = 256;
constexpr uint32_t MAX_WORKGROUP_SIZE_Y = 256;

// Softmax probabilities are ~1 / axis_dims (1e-3 and below), far below the default absolute tolerance: atol 1e-6.
/* kerntune:
args  = ["input_0: in f32[L * A * R]", "output_0: out f32[L * A * R]", "axis_chunk: u32 = A * R",
         "n_elements: u32 = A", "element_stride: u32 = R", "left_of_axis: u32 = L", "right_of_axis: u32 = R"]
sizes = [{ L = 65536, A = 512, R = 1 }, { L = 32, A = 4097, R = 1 }, { L = 70001, A = 77, R = 3 }]
grid  = ["L if L <= 65535 else cdiv(L, cdiv(L, 65535))", "R if R <= 65535 else cdiv(R, cdiv(R, 65535))"]
block = ["1 if L <= 65535 else cdiv(L, 65535)", "1 if R <= 65535 else cdiv(R, 65535)"]
atol  = 1e-6
*/
__global__ void softmax_main(const float* input_0, float* output_0, uint32_t axis_chunk, uint32_t n_elements,
                             uint32_t element_stride, uint32_t left_of_axis, uint32_t right_of_axis) {
  // global_invocation_id
  const uint32_t gidx = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t gidy = blockIdx.y * blockDim.y + threadIdx.y;
  if (gidx >= left_of_axis || gidy >= right_of_axis) return;  // fixed: invocations past the tensor
  const uint32_t chunk_start = gidx * axis_chunk + gidy;

  // Softmax = exp(input - max(input)) / sum(exp(input - max(input)))

  // First, determine max(input); log(0) is -Infinity
  float max_element = logf(0.0f);
  for (uint32_t k = 0u; k < n_elements; k = k + 1u) {
    const float element = input_0[chunk_start + (k * element_stride)];
    max_element = fmaxf(max_element, element);
  }

  // Calculate sum(exp(input - max(input)))
  float sum = 0.0f;
  for (uint32_t k = 0u; k < n_elements; k = k + 1u) {
    const float element = input_0[chunk_start + (k * element_stride)];
    sum = sum + expf(element - max_element);
  }

  // Calculate elements and write to output
  for (uint32_t k = 0u; k < n_elements; k = k + 1u) {
    const float element = input_0[chunk_start + (k * element_stride)];
    output_0[chunk_start + (k * element_stride)] = expf(element - max_element) / sum;
  }
}

// compiler.rs workgroup_size(): (number of workgroups, invocations per workgroup) for x items
static void workgroup_size(uint64_t x, uint32_t max_threads, uint32_t max_workgroup_size, uint32_t* threads,
                           uint32_t* size) {
  const uint64_t max_x = max_threads;
  if (x > max_x) {
    const uint64_t workgroup_size = (x + max_x - 1) / max_x;
    const uint64_t n = (x + workgroup_size - 1) / workgroup_size;
    assert(n <= max_threads && "ComputeLimitExceeded: threads");
    assert(workgroup_size <= max_workgroup_size && "ComputeLimitExceeded: workgroup size");
    *threads = (uint32_t)n;
    *size = (uint32_t)workgroup_size;
  } else {
    *threads = (uint32_t)x;
    *size = 1;
  }
}

}  // namespace wonnx

// input, output: device fp32 tensors of shape `dims`; axis: the ONNX attribute (negative allowed from opset 13);
// opset_version: 1..15 as wonnx accepts.
void wonnx_softmax(const float* input, float* output, const std::vector<uint64_t>& dims, int64_t axis,
                   int opset_version, cudaStream_t stream) {
  const int64_t rank = (int64_t)dims.size();
  if (axis < 0) {
    assert(opset_version >= 13 && "InvalidAttributeValue: negative axis before opset 13");
    axis += rank;
  }
  assert(axis >= 0 && axis < rank && "InvalidAttributeValue: axis");

  uint64_t left_of_axis = 1, axis_chunk = 1, right_of_axis_chunk = 1;
  for (int64_t i = 0; i < axis; ++i) left_of_axis *= dims[i];
  for (int64_t i = axis; i < rank; ++i) axis_chunk *= dims[i];
  for (int64_t i = axis + 1; i < rank; ++i) right_of_axis_chunk *= dims[i];
  if (left_of_axis == 0 || axis_chunk == 0) return;
  assert(left_of_axis * axis_chunk < (1ull << 32) && "u32 indices, as the shader has them");

  uint32_t x_threads, workgroup_size_x;
  wonnx::workgroup_size(left_of_axis, wonnx::MAX_COMPUTE_WORKGROUPS_PER_DIMENSION, wonnx::MAX_WORKGROUP_SIZE_X,
                        &x_threads, &workgroup_size_x);

  uint32_t n_elements, element_stride, right_of_axis, y_threads, workgroup_size_y;
  if (opset_version < 11) {
    // Softmax-1: everything right of the axis is one softmax
    n_elements = (uint32_t)axis_chunk;
    element_stride = 1;
    right_of_axis = 1;
    y_threads = 1;
    workgroup_size_y = 1;
  } else {
    n_elements = (uint32_t)dims[axis];
    element_stride = (uint32_t)right_of_axis_chunk;
    right_of_axis = (uint32_t)right_of_axis_chunk;
    wonnx::workgroup_size(right_of_axis_chunk, wonnx::MAX_COMPUTE_WORKGROUPS_PER_DIMENSION,
                          wonnx::MAX_WORKGROUP_SIZE_Y, &y_threads, &workgroup_size_y);
  }

  // compute_pass.dispatch_workgroups(x_threads, y_threads, 1) with @workgroup_size(wsx, wsy)
  const dim3 grid(x_threads, y_threads, 1);
  const dim3 block(workgroup_size_x, workgroup_size_y, 1);
  wonnx::softmax_main<<<grid, block, 0, stream>>>(input, output, (uint32_t)axis_chunk, n_elements, element_stride,
                                                  (uint32_t)left_of_axis, right_of_axis);
}
