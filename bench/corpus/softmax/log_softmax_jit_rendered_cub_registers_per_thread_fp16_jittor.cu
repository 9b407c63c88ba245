// Row (log-)softmax as Jittor generates it (python/jittor/other/code_softmax.py, softmax_v1 behind
// jt.nn.softmax / jt.nn.log_softmax on the last dim): Jittor renders a CUDA source per row length through jt.code,
// with tnum = 125 when the length is a multiple of 125 else 128 threads, per_thread = ceil(len / tnum) registers
// per thread (v[per_thread][ILP], ILP > 1 only when the length is a multiple of tnum), a `#pragma unroll` loop over
// them guarded by `if ((i * tnum + threadIdx.x) * ILP < len)` when the length is not a multiple of tnum, loads and
// stores through vload<bytes>, and cub::BlockReduce<float, tnum> for the max and the sum, each result broadcast
// through a __shared__ float. The kernel is the generated one, named `kernel`, one row per block.
// Log mode (need_log): v = T(x - vmax) is stored back into the register array in the INPUT type (half), the sum
// is of expf of the rounded values, and the output is v - T(log(vsum)), the log rounded to half before the
// subtraction (Jittor's @expand_op(log, in0_type, vsum)): two roundings to fp16, kept.
// Here the generated source is written as a template over <tnum, per_thread, ILP, need_log>; the C++ host side
// plays Jittor's JIT cache: it picks tnum like Jittor and the smallest rendered per_thread bucket that covers the
// row (8, 16, 24, 32, 40, 64 registers), instantiated for fp16 log-softmax. Jittor's text puts `#pragma unroll`
// directly after the unbraced guard `if`; the guarded bodies are braced here (same code). The spec is the 128-thread,
// 40-register, guarded instance (rows of 4097 ... 5120 columns, vocab-sized).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/cub.cuh>
#include <cstring>

// type/fp16_compute.h's vload: copy nbytes between registers and memory as one access when it fits
template <int nbytes, class T>
__device__ __forceinline__ void vload(T* __restrict__ a, const T* __restrict__ b) {
  if (nbytes == 16) {
    *(float4*)a = *(const float4*)b;
  } else if (nbytes == 8) {
    *(float2*)a = *(const float2*)b;
  } else if (nbytes == 4) {
    *(float*)a = *(const float*)b;
  } else if (nbytes == 2) {
    *(__half*)a = *(const __half*)b;
  } else {
    memcpy(a, b, nbytes);
  }
}

// Jittor passes cub::Max(), which CCCL 3 removed; the same functor, written out
struct CubMax {
  __device__ __forceinline__ float operator()(const float& a, const float& b) const { return b > a ? b : a; }
};

/* kerntune:
args  = ["x: in f16[rows * len]", "y: out f16[rows * len]", "len: i32 = len"]
sizes = [{ rows = 8192, len = 5003 }, { rows = 8, len = 4999 }, { rows = 1001, len = 4097 }]
grid  = "rows"
block = "125 if len % 125 == 0 else 128"
template_args = ["128", "40", "1", "1"]
*/
template <int tnum, int per_thread, int ILP, int need_log>
__global__ void kernel(__half* x, __half* y, int len) {
  typedef cub::BlockReduce<float, tnum> BlockReduce;
  __shared__ typename BlockReduce::TempStorage temp_storage;

  int id = blockIdx.x * len;
  __half v[per_thread][ILP];
#pragma unroll
  for (int i = 0; i < per_thread; i++)
    if ((i * tnum + threadIdx.x) * ILP < len)
      vload<sizeof(__half) * ILP>(v[i], &x[id + (i * tnum + threadIdx.x) * ILP]);

  float v1 = -INFINITY;
#pragma unroll
  for (int i = 0; i < per_thread; i++)
    if ((i * tnum + threadIdx.x) * ILP < len) {
#pragma unroll
      for (int j = 0; j < ILP; j++) {
        v1 = ::max(v1, float(v[i][j]));
      }
    }
  __shared__ float vmax;
  auto tmp = BlockReduce(temp_storage).Reduce(v1, CubMax());
  if (threadIdx.x == 0)
    vmax = tmp;
  __syncthreads();

  v1 = 0;
#pragma unroll
  for (int i = 0; i < per_thread; i++)
    if ((i * tnum + threadIdx.x) * ILP < len) {
#pragma unroll
      for (int j = 0; j < ILP; j++) {
        if (need_log) {
          v[i][j] = float(v[i][j]) - vmax;
          v1 += expf(float(v[i][j]));
        } else {
          v[i][j] = expf(float(v[i][j]) - vmax);
          v1 += float(v[i][j]);
        }
      }
    }

  // the temp storage is reused: cub needs a barrier between the two reductions (the vmax one above)
  tmp = BlockReduce(temp_storage).Sum(v1);
  __shared__ float vsum;
  if (threadIdx.x == 0)
    vsum = tmp;
  __syncthreads();

#pragma unroll
  for (int i = 0; i < per_thread; i++)
    if ((i * tnum + threadIdx.x) * ILP < len) {
#pragma unroll
      for (int j = 0; j < ILP; j++) {
        if (need_log)
          v[i][j] = v[i][j] - __half(logf(vsum));
        else
          v[i][j] = float(v[i][j]) / vsum;
      }
    }
#pragma unroll
  for (int i = 0; i < per_thread; i++)
    if ((i * tnum + threadIdx.x) * ILP < len)
      vload<sizeof(__half) * ILP>(&y[id + (i * tnum + threadIdx.x) * ILP], v[i]);
}

template <int tnum, int per_thread>
static void launch_rendered(__half* x, __half* y, int bnum, int len, cudaStream_t stream) {
  kernel<tnum, per_thread, 1, 1><<<bnum, tnum, 0, stream>>>(x, y, len);
}

// x, y: [rows, len] fp16 on the device; y = log_softmax(x, dim=-1). Rows longer than 64 * tnum are not rendered
// here (Jittor switches to its streaming kernel past that); returns false for them.
bool jt_log_softmax_v1_f16(__half* x, __half* y, int rows, int len, cudaStream_t stream) {
  const int tnum = len % 125 == 0 ? 125 : 128;
  const int per_thread = (len - 1) / tnum + 1;
  if (rows <= 0 || len <= 0) return true;
  cudaGetLastError();
  if (tnum == 125) {
    if (per_thread <= 8) launch_rendered<125, 8>(x, y, rows, len, stream);
    else if (per_thread <= 16) launch_rendered<125, 16>(x, y, rows, len, stream);
    else if (per_thread <= 24) launch_rendered<125, 24>(x, y, rows, len, stream);
    else if (per_thread <= 32) launch_rendered<125, 32>(x, y, rows, len, stream);
    else if (per_thread <= 40) launch_rendered<125, 40>(x, y, rows, len, stream);
    else if (per_thread <= 64) launch_rendered<125, 64>(x, y, rows, len, stream);
    else return false;
  } else {
    if (per_thread <= 8) launch_rendered<128, 8>(x, y, rows, len, stream);
    else if (per_thread <= 16) launch_rendered<128, 16>(x, y, rows, len, stream);
    else if (per_thread <= 24) launch_rendered<128, 24>(x, y, rows, len, stream);
    else if (per_thread <= 32) launch_rendered<128, 32>(x, y, rows, len, stream);
    else if (per_thread <= 40) launch_rendered<128, 40>(x, y, rows, len, stream);
    else if (per_thread <= 64) launch_rendered<128, 64>(x, y, rows, len, stream);
    else return false;
  }
  return cudaGetLastError() == cudaSuccess;
}
