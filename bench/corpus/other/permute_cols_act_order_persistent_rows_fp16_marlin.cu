// Act-order column permutation of the activations as the GPTQ-Marlin kernels do it before their GEMM
// (gptq_marlin.cu from IST-DASLab's Marlin as extended by Neural Magic, vendored by vLLM, SGLang, TGI and others:
// permute_cols_kernel, launched by marlin_mm when has_act_order): a GPTQ checkpoint quantized with act-order
// (desc_act) stores its weight rows in a permuted order, so the fp16 activations A [size_m, size_k] are gathered
// column-wise into a temporary buffer first:
//   out[row, k] = A[row, perm[k]]
// Marlin's conventions: the buffers passed as int4 pointers (16-byte units; row stride size_k * sizeof(half) / 16,
// size_k a multiple of 8) and reinterpreted as half rows inside, a persistent launch of one block per SM
// (grid = sms, the device's multiprocessor count handed to the GEMM, 132 on an H100 / H200) with
// default_threads = 256, each block taking block_rows = div_ceil(size_m, sms) consecutive rows (blocks past the
// end get a negative count and take none), a permute_row lambda walking the row in steps of default_threads with
// the remainder (size_k % 256) done by the first threads, one gathered element per thread and step, int indexing.
// perm is drawn with repetitions (randint): a gather reads whatever column it names and each output element is
// still written exactly once.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace gptq_marlin {

static constexpr int default_threads = 256;

static constexpr int div_ceil(int a, int b) { return (a + b - 1) / b; }

/* kerntune:
args  = ["a_int4_ptr: in f16[size_m * size_k]", "perm_int_ptr: in i32[size_k] ~ randint(0, size_k)",
         "out_int4_ptr: out f16[size_m * size_k]", "size_m: i32 = size_m", "size_k: i32 = size_k",
         "block_rows: i32 = cdiv(size_m, 132)"]
sizes = [{ size_m = 8192, size_k = 4096 }, { size_m = 4, size_k = 11008 }, { size_m = 1001, size_k = 4104 }]
grid  = 132
block = 256
*/
__global__ void permute_cols_kernel(int4 const* __restrict__ a_int4_ptr,
                                    int const* __restrict__ perm_int_ptr,
                                    int4* __restrict__ out_int4_ptr, int size_m,
                                    int size_k, int block_rows) {
  int start_row = block_rows * blockIdx.x;
  int finish_row = start_row + block_rows;
  if (finish_row > size_m) {
    finish_row = size_m;
  }
  int cur_block_rows = finish_row - start_row;

  int row_stride = size_k * sizeof(half) / 16;

  auto permute_row = [&](int row) {
    int iters = size_k / default_threads;
    int rest = size_k % default_threads;

    int offset = row * row_stride;

    half const* a_row_half = reinterpret_cast<half const*>(a_int4_ptr + offset);
    half* out_half = reinterpret_cast<half*>(out_int4_ptr + offset);

    int base_k = 0;

    for (int i = 0; i < iters; i++) {
      int cur_k = base_k + threadIdx.x;
      int src_pos = perm_int_ptr[cur_k];

      out_half[cur_k] = a_row_half[src_pos];

      base_k += default_threads;
    }

    if (rest) {
      if (threadIdx.x < rest) {
        int cur_k = base_k + threadIdx.x;
        int src_pos = perm_int_ptr[cur_k];

        out_half[cur_k] = a_row_half[src_pos];
      }
    }
  };

  for (int i = 0; i < cur_block_rows; i++) {
    int cur_row = start_row + i;
    if (cur_row < size_m) {
      permute_row(cur_row);
    }
  }
}

// The act-order step of the Marlin GEMM: A [prob_m, prob_k] fp16, perm [prob_k] int32, a_tmp like A; device
// pointers; sms the number of SMs the GEMM runs on.
void permute_cols(const void* A, const void* perm, void* a_tmp, int prob_m, int prob_k, int sms,
                  cudaStream_t stream) {
  const int4* A_ptr = (const int4*)A;
  const int* perm_ptr = (const int*)perm;
  int4* a_tmp_ptr = (int4*)a_tmp;

  // Permute A columns
  int block_rows = div_ceil(prob_m, sms);
  permute_cols_kernel<<<sms, default_threads, 0, stream>>>(A_ptr, perm_ptr, a_tmp_ptr, prob_m, prob_k,
                                                           block_rows);
}

}  // namespace gptq_marlin
