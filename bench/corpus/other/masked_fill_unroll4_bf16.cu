// masked_fill (bf16): out = mask ? value : self, with a uint8 (bool) mask of the same shape, e.g. attention scores
// masked before a softmax. Written the way PyTorch's unrolled elementwise loop is: num_threads = 128 threads per
// block, thread_work_size = 4 elements per thread spaced num_threads apart, a block covering block_work_size = 512
// contiguous elements; a #pragma unroll loop loads into registers, a second computes and stores, each element
// bounds-checked. 32-bit indexing.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

constexpr int num_threads = 128;
constexpr int thread_work_size = 4;
constexpr int block_work_size = num_threads * thread_work_size;

/* kerntune:
args  = ["out: out bf16[rows * cols]", "self: in bf16[rows * cols]", "mask: in u8[rows * cols] ~ randint(0, 2)",
         "value: f32 = -10000.0", "numel: i32 = rows * cols"]
sizes = [{ rows = 8192, cols = 8192 }, { rows = 32, cols = 4096 }, { rows = 1001, cols = 2053 }]
grid  = "cdiv(rows * cols, 512)"
block = "128"
*/
__global__ void masked_fill_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ self,
                                   const uint8_t* __restrict__ mask, float value, int numel) {
  const int base = blockIdx.x * block_work_size + threadIdx.x;
  __nv_bfloat16 x[thread_work_size];
  bool m[thread_work_size];

#pragma unroll
  for (int i = 0; i < thread_work_size; i++) {
    const int idx = base + i * num_threads;
    if (idx < numel) {
      x[i] = self[idx];
      m[i] = mask[idx] != 0;
    }
  }

  const __nv_bfloat16 fill = __float2bfloat16(value);
#pragma unroll
  for (int i = 0; i < thread_work_size; i++) {
    const int idx = base + i * num_threads;
    if (idx < numel) {
      out[idx] = m[i] ? fill : x[i];
    }
  }
}

void masked_fill_bf16(__nv_bfloat16* out, const __nv_bfloat16* self, const uint8_t* mask, float value, int64_t numel,
                      cudaStream_t stream) {
  const int64_t grid = (numel + block_work_size - 1) / block_work_size;
  masked_fill_kernel<<<grid, num_threads, 0, stream>>>(out, self, mask, value, (int)numel);
}
