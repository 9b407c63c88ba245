// Split-KV combine of flash decoding as TileLang writes it (tile-ai/tilelang, examples/flash_decoding/
// example_gqa_decode.py: the `combine` macro run after `flash_attn_split` in flashattn_gqa_decode_split), written as
// the CUDA that TileLang lowers that macro to, fp16:
//   Output_partial [batch, heads, num_split, dim] fp16 (each split's output already divided by its own sum), glse
//   [batch, heads, num_split] in the BASE-2 domain (log2(sum) + max * scale * log2(e)) and stored in fp16 like the
//   rest of the example (dtype = "float16"), Output [batch, heads, dim] fp16
//   lse_max = max_k glse[k] (every thread folds all num_split values in its own registers: the lse_local fragment
//   is laid out (split, thread) -> thread), lse_logsum = log2(sum_k exp2(glse[k] - lse_max)) + lse_max, then
//   o = sum_k Output_partial[k] * exp2(glse[k] - lse_logsum) in an fp32 accumulator, po_local kept in fp16, one
//   rounding at the store
//   launch: T.Kernel(heads, batch, threads=128): grid (heads, batch), 128 threads, thread i owns channel i of dim
//   generated-code conventions: extern "C", __launch_bounds__(128, 1), buffers in TVM's sorted order (Output,
//   Output_partial, glse), ((int)blockIdx.x) casts, static shapes folded in as literals (num_split = 8, dim = 128,
//   as the example compiles them), batch and heads symbolic (T.symbolic), exp2f / log2f, local arrays of one
// The host wrapper is the launch TileLang's generated host code makes, with a stream. No bug found.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math_constants.h>

/* kerntune:
args  = ["Output: out f16[B * H * 128]", "Output_partial: in f16[B * H * 8 * 128]",
         "glse: in f16[B * H * 8] ~ uniform(-4, 12)", "batch: i32 = B", "heads: i32 = H"]
sizes = [{ B = 1024, H = 32 }, { B = 4, H = 32 }, { B = 37, H = 14 }]
grid  = ["H", "B"]
block = 128
*/
extern "C" __global__ void __launch_bounds__(128, 1)
    flashattn_gqa_decode_split_kernel_1(half* __restrict__ Output, const half* __restrict__ Output_partial,
                                        const half* __restrict__ glse, int batch, int heads) {
  float o_accum_local[1];
  half lse_local[8];
  float lse_max_local[1];
  float lse_logsum_local[1];
  float lse_local_split[1];
  half po_local[1];
  float scale_local[1];
  lse_logsum_local[0] = 0.000000e+00f;
  o_accum_local[0] = 0.000000e+00f;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    lse_local[k] = glse[((((int)blockIdx.y) * heads + ((int)blockIdx.x)) * 8) + k];
  }
  lse_max_local[0] = -CUDART_INF_F;
#pragma unroll
  for (int rv = 0; rv < 8; ++rv) {
    lse_max_local[0] = max(lse_max_local[0], __half2float(lse_local[rv]));
  }
  for (int k_1 = 0; k_1 < 8; ++k_1) {
    lse_local_split[0] = __half2float(glse[((((int)blockIdx.y) * heads + ((int)blockIdx.x)) * 8) + k_1]);
    lse_logsum_local[0] = (lse_logsum_local[0] + exp2f((lse_local_split[0] - lse_max_local[0])));
  }
  lse_logsum_local[0] = (log2f(lse_logsum_local[0]) + lse_max_local[0]);
  for (int k_2 = 0; k_2 < 8; ++k_2) {
    po_local[0] = Output_partial[((((((int)blockIdx.y) * heads + ((int)blockIdx.x)) * 8) + k_2) * 128) +
                                 ((int)threadIdx.x)];
    lse_local_split[0] = __half2float(glse[((((int)blockIdx.y) * heads + ((int)blockIdx.x)) * 8) + k_2]);
    scale_local[0] = exp2f((lse_local_split[0] - lse_logsum_local[0]));
    o_accum_local[0] = (o_accum_local[0] + (__half2float(po_local[0]) * scale_local[0]));
  }
  Output[(((((int)blockIdx.y) * heads + ((int)blockIdx.x)) * 128) + ((int)threadIdx.x))] =
      __float2half_rn(o_accum_local[0]);
}

// Output: device [batch, heads, 128] fp16; Output_partial: [batch, heads, 8, 128] fp16; glse: [batch, heads, 8]
// fp16 (base 2). num_split = 8 and dim = 128 are compiled in.
void flashattn_gqa_decode_combine(half* Output, const half* Output_partial, const half* glse, int batch, int heads,
                                  cudaStream_t stream) {
  dim3 grid(heads, batch, 1);
  dim3 block(128, 1, 1);
  flashattn_gqa_decode_split_kernel_1<<<grid, block, 0, stream>>>(Output, Output_partial, glse, batch, heads);
}
