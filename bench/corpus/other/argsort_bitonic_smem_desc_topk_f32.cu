// Row-wise argsort as llama.cpp's ggml-cuda argsort.cu does it (k_argsort_f32_i32), the kernel behind GGML_OP_ARGSORT
// and so behind ggml_top_k (argsort descending, then a view of the first k columns): MoE router top-k selection
// over the expert logits / probabilities of each token (and top-k sampling over short candidate lists).
//   x   fp32 [nrows, ncols];  dst int32 [nrows, ncols]: the column indices of the row sorted by value, DESCENDING
// A bitonic sorting network over indices in dynamic shared memory: ncols padded to the next power of two
// (ncols_pad threads, one block per row), each thread owning index slot `col`; for every stage k = 2, 4, ...,
// ncols_pad and every step j = k / 2, ..., 1 the thread whose partner col ^ j is above it compares the values its
// two slots point at and swaps the slots when they are out of order for the direction of its k-block (ascending
// when col & k == 0 in the network's terms, i.e. the sort order, else the opposite), padding slots (index >=
// ncols) always sinking to the end; __syncthreads between steps. The values are read from global memory
// through the indices at every comparison (x_row[dst_row[col]]), never cached.
// Launch as ggml (older layout): block (ncols_pad, 1, 1), grid (1, nrows, 1), dynamic smem ncols_pad ints,
// template over the sort order (both instantiated, chosen at run time), static kernel.
#include <cuda_runtime.h>

enum ggml_sort_order {
  GGML_SORT_ORDER_ASC,
  GGML_SORT_ORDER_DESC,
};

template <typename T>
static inline __device__ void ggml_cuda_swap(T& a, T& b) {
  T tmp = a;
  a = b;
  b = tmp;
}

// Values normal(0, 1) in fp32: ties (which a sorting network may order either way) practically never occur.
/* kerntune:
args  = ["x: in f32[nrows * ncols]", "dst: out i32[nrows * ncols]", "ncols: i32 = ncols",
         "ncols_pad: i32 = 1024 if ncols > 512 else 512 if ncols > 256 else 256 if ncols > 128 else 128 if ncols > 64 else 64 if ncols > 32 else 32"]
sizes = [{ nrows = 60000, ncols = 160 }, { nrows = 8, ncols = 256 }, { nrows = 37, ncols = 100 }]
grid  = [1, "nrows"]
block = "1024 if ncols > 512 else 512 if ncols > 256 else 256 if ncols > 128 else 128 if ncols > 64 else 64 if ncols > 32 else 32"
smem  = "4 * (1024 if ncols > 512 else 512 if ncols > 256 else 256 if ncols > 128 else 128 if ncols > 64 else 64 if ncols > 32 else 32)"
template_args = ["GGML_SORT_ORDER_DESC"]
*/
template <ggml_sort_order order>
static __global__ void k_argsort_f32_i32(const float* x, int* dst, const int ncols, int ncols_pad) {
  // one index slot per thread
  int col = threadIdx.x;
  int row = blockIdx.y;

  if (col >= ncols_pad) {
    return;
  }

  const float* x_row = x + row * ncols;
  extern __shared__ int dst_row[];

  // the identity permutation, padding included
  dst_row[col] = col;

  __syncthreads();

  for (int k = 2; k <= ncols_pad; k *= 2) {
    for (int j = k / 2; j > 0; j /= 2) {
      int ixj = col ^ j;
      if (ixj > col) {
        if ((col & k) == 0) {
          if (dst_row[col] >= ncols ||
              (dst_row[ixj] < ncols && (order == GGML_SORT_ORDER_ASC ? x_row[dst_row[col]] > x_row[dst_row[ixj]]
                                                                     : x_row[dst_row[col]] < x_row[dst_row[ixj]]))) {
            ggml_cuda_swap(dst_row[col], dst_row[ixj]);
          }
        } else {
          if (dst_row[ixj] >= ncols ||
              (dst_row[col] < ncols && (order == GGML_SORT_ORDER_ASC ? x_row[dst_row[col]] < x_row[dst_row[ixj]]
                                                                     : x_row[dst_row[col]] > x_row[dst_row[ixj]]))) {
            ggml_cuda_swap(dst_row[col], dst_row[ixj]);
          }
        }
      }
      __syncthreads();
    }
  }

  // the sorted indices, without the padding
  if (col < ncols) {
    dst[row * ncols + col] = dst_row[col];
  }
}

static int next_power_of_2(int x) {
  int n = 1;
  while (n < x) {
    n *= 2;
  }
  return n;
}

// x, dst: device pointers; ncols <= 1024 (the padded row is one block of threads and its indices fit in shared
// memory), nrows <= 65535 (the grid's y dimension).
static void argsort_f32_i32_cuda(const float* x, int* dst, const int ncols, const int nrows, ggml_sort_order order,
                                 cudaStream_t stream) {
  // the network sorts a power-of-two length: pad the row, padding indices sink to the end
  const int ncols_pad = next_power_of_2(ncols);

  const dim3 block_dims(ncols_pad, 1, 1);
  const dim3 block_nums(1, nrows, 1);
  const size_t shared_mem = ncols_pad * sizeof(int);

  if (order == GGML_SORT_ORDER_ASC) {
    k_argsort_f32_i32<GGML_SORT_ORDER_ASC><<<block_nums, block_dims, shared_mem, stream>>>(x, dst, ncols, ncols_pad);
  } else if (order == GGML_SORT_ORDER_DESC) {
    k_argsort_f32_i32<GGML_SORT_ORDER_DESC><<<block_nums, block_dims, shared_mem, stream>>>(x, dst, ncols, ncols_pad);
  }
}
