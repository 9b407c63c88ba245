// Sparse matrix (ELL: nnz_row nonzeros per row, their column indices beside them) times a dense vector, fp32, one
// block per row: each thread strides over the row's nonzeros from the row's start, gathering x by column, then a
// shared-memory tree sums the block's partials.
#define THREADS 128

/* kerntune:
args  = ["nnz_row: i32 = nnz_row", "col_idx: in i32[rows * nnz_row] ~ randint(0, cols)", "vals: in f32[rows * nnz_row]",
         "x: in f32[cols]", "y: out f32[rows]"]
sizes = [{ rows = 4096, nnz_row = 2048, cols = 65536 }, { rows = 5, nnz_row = 33, cols = 100 }]
grid  = "rows"
block = "THREADS"
atol  = 1e-3
*/
__global__ void ell_spmv(int nnz_row, const int* __restrict__ col_idx,
                         const float* __restrict__ vals, const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float part[THREADS];
  const int row = blockIdx.x;
  const int begin = row * nnz_row, end = begin + nnz_row;
  float acc = 0.f;
  for (int j = begin + threadIdx.x; j < end; j += THREADS) {
    acc += vals[j] * x[col_idx[j]];
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[row] = part[0];
}

void spmv(int nnz_row, const int* col_idx, const float* vals, const float* x, float* y, int rows) {
  ell_spmv<<<rows, THREADS>>>(nnz_row, col_idx, vals, x, y);
}
