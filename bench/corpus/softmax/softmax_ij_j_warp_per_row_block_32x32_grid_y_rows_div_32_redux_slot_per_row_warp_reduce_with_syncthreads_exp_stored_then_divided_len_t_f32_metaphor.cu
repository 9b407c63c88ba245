// Row softmax as the Metaphor deep-learning library writes it (andrewCodeDev/Metaphor, a Zig tensor library whose
// CUDA kernels are generated from templated .cu sources per scalar type: src/cuda/nvcc_src/kernel_softmax_ij_j.cu,
// __kernel_softmax_ij_j_RScalar behind extern "C" launch_softmax_ij_j_RScalar, with the helpers of
// src/cuda/kernel_header.h: MaxOP / AddOP functors, warpReduce<OP>, Init<T>::infinity(), rexp, DIMPAD). The
// generator substitutes RScalar by r16 / r32 / r64; this is the r32 (float) instance. Einsum-style name: softmax of
// A[i, j] over j, out of place into B. Launch: block (WARP_SIZE, WARP_SIZE) = (32, 32), grid (1, DIMPAD(m, 32)):
// each warp (threadIdx.y) owns one row, its 32 lanes stride the row's columns by WARP_SIZE with "mobile pointers"
// advanced by 32 each step; rows past m (the last grid row of a tail) keep running with their loads masked off.
// Three passes over global memory: the max (lanes start at -infinity, warpReduce<MaxOP> xor butterfly, lane 0 puts
// the row max in a __shared__ redux[WARP_SIZE] slot of its row, __syncthreads, every lane reads it back), the
// exponentials rexp(a - max) written to B and summed (same path through redux), then B /= sum in place. Metaphor's
// warpReduce starts with a __syncthreads (its comment calls the full-mask shuffle with idle lanes undefined, so every
// thread of the block always enters it), which also orders the reuse of the redux slot between the two reductions.
// Argument order (A, B, m, n), len_t sizes (64-bit unsigned), the launcher takes Metaphor's StreamCtx (a context
// holding the cudaStream_t). No bug found (masked loads keep the tail rows in bounds; the grid's y extent allows
// 2^21 rows). Sizes: a prefill batch of 8192 rows of 4096, a decode batch of 4 vocabulary rows (one block, 28 idle
// warps), and 999 rows of 1031 (the last block 7 live rows, each row 1031 = 32 * 32 + 7 columns).
// Tolerance: probabilities of ~1 / n (down to ~3e-5 over a 32000-entry row) sit at the default f32 atol, so atol is
// 1e-6 and the relative tolerance stays at the f32 default.
#include <cuda_runtime.h>
#include <cmath>
#include <limits>

typedef float r32;
typedef unsigned long len_t;

// Metaphor passes a StreamContext* around; the launcher casts it back to the stream
typedef struct {
  void* cuda_stream;
  void* blas_handle;
} StreamContext;
typedef StreamContext* StreamCtx;

#define WARP_SIZE 32
#define DIMPAD(M, N) (((M) + ((N) - 1)) / (N))

inline cudaStream_t getCtx(StreamCtx stream) {
  return (stream == nullptr) ? static_cast<cudaStream_t>(nullptr) : static_cast<cudaStream_t>(stream->cuda_stream);
}

__device__ __inline__ r32 rexp(r32 x) { return std::exp(x); }

struct MaxOP {
  template<class T> static __inline__ __device__ T apply(T x, T y) { return (x > y) ? x : y; }
};
struct AddOP {
  template<class T> static __inline__ __device__ T apply(T x, T y) { return x + y; }
};

template<class T> struct Init;
template<> struct Init<r32> {
  static constexpr r32 inf_result = std::numeric_limits<r32>::infinity();
  static __device__ __inline__ r32 infinity() { return Init<r32>::inf_result; }
};

// every thread of the block enters this (it holds a barrier); idle lanes pass the op's identity
template <class OP, typename T>
__inline__ __device__ T warpReduce(T value) {
  __syncthreads();

  for (int mask = WARP_SIZE >> 1; mask > 0; mask >>= 1) {
    value = OP::apply(value, __shfl_xor_sync(0xffffffff, value, mask, WARP_SIZE));
  }
  return value;
}

/* kerntune:
args  = ["A: in f32[m * n]", "B: out f32[m * n]", "m: u64 = m", "n: u64 = n"]
sizes = [{ m = 8192, n = 4096 }, { m = 4, n = 32000 }, { m = 999, n = 1031 }]
grid  = [1, "cdiv(m, 32)"]
block = [32, 32]
atol  = 1e-6
*/
__global__ void __kernel_softmax_ij_j_r32(
    const r32* A,
          r32* B,
    len_t m,
    len_t n
) {
  __shared__ r32 redux[WARP_SIZE];

  // tile row (the row of this warp) and column (this lane)
  len_t t_row = threadIdx.y;
  len_t t_col = threadIdx.x;

  const len_t offset = n * ((blockIdx.y * WARP_SIZE) + t_row);
  A += offset;
  B += offset;

  const len_t m_bound = (blockIdx.y * WARP_SIZE) + t_row;

  // mobile pointers
  auto A_tmp = A;
  auto B_tmp = B;

  //////////////////////////////////
  /// row max //////////////////////

  r32 grid_max = -Init<r32>::infinity();

  for (len_t step = 0; step < n; step += WARP_SIZE) {
    if ((m_bound < m) && (step + t_col) < n) {
      grid_max = MaxOP::apply(grid_max, A_tmp[t_col]);
    }
    A_tmp += WARP_SIZE;
  }

  grid_max = warpReduce<MaxOP>(grid_max);

  if (m_bound < m && t_col == 0) {
    redux[t_row] = grid_max;
  }

  __syncthreads();

  if (m_bound < m) {
    grid_max = redux[t_row];
  }

  //////////////////////////////////
  /// exponentials and their sum ///

  r32 grid_sum = r32(0.0f);

  A_tmp = A;

  for (len_t step = 0; step < n; step += WARP_SIZE) {
    if ((m_bound < m) && (step + t_col) < n) {
      const r32 u = rexp(A_tmp[t_col] - grid_max);
      B_tmp[t_col] = u;
      grid_sum += u;
    }
    A_tmp += WARP_SIZE;
    B_tmp += WARP_SIZE;
  }

  grid_sum = warpReduce<AddOP>(grid_sum);

  if (m_bound < m && t_col == 0) {
    redux[t_row] = grid_sum;
  }

  __syncthreads();

  if (m_bound < m) {
    grid_sum = redux[t_row];
  }

  //////////////////////////////////
  /// normalize in place ///////////

  for (len_t step = 0; step < n; step += WARP_SIZE) {
    if ((m_bound < m) && (step + t_col) < n) {
      B[t_col] /= grid_sum;
    }
    B += WARP_SIZE;
  }
}

// A, B: device [m, n] row-major r32.
extern "C" void launch_softmax_ij_j_r32(
  StreamCtx stream,
  const r32* A,
        r32* B,
  len_t m,
  len_t n
) {
  dim3 grid (
    1, DIMPAD(m, WARP_SIZE)
  );

  dim3 block (
    WARP_SIZE,
    WARP_SIZE
  );

  __kernel_softmax_ij_j_r32<<<grid, block, 0, getCtx(stream)>>>(
    A, B, m, n
  );
}
