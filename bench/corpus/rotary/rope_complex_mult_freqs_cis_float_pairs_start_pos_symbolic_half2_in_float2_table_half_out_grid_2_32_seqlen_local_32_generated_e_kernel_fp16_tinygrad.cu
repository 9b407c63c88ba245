// Rotary embedding as tinygrad generates it for its LLaMA example (tinygrad/tinygrad, examples/llama.py ->
// extra/models/llama.py apply_rotary_emb + complex_mult, rendered by tinygrad/renderer/cstyle.py's CUDARenderer),
// written in the shape of that generated code:
//   xk [1, seqlen, 32, 128] half (the key projection, realized), freqs_cis [1, max_context, 1, 64, 2] float32 (cos,
//   sin INTERLEAVED per pair, the float32 table precompute_freqs_cis builds), sliced at start_pos:start_pos+seqlen
//   GPT-J pairs: xk viewed as [..., 64, 2] (a, b), c = freqs_cis[..., 0], d = freqs_cis[..., 1],
//   out = (a*c - b*d, a*d + b*c): half times float promotes to float, so the math is float and the ONE rounding is
//   the cast to the kv cache's half dtype (`.cast(self.cache_kv.dtype)`) fused into the same kernel; out of place
//   (data0 is a new buffer)
//   the subtraction rendered as tinygrad renders SUB, x+(y*-1.0f); the symbolic Variable start_pos of the llama JIT
//   is a trailing `const int` argument, the token count (symbolic here too) only the grid's z extent (no bounds
//   check: the grid is exact); heads = 32 and head_dim = 128 are baked into the index arithmetic as shifts, as
//   every generated kernel bakes its shapes; int32 indices
// Launch as tinygrad's CUDA runtime does: global (2, 32, seqlen) blocks of local 32, the pair dimension upcast by 2
// into half2 / float2 vector loads and stores, `extern "C"` with __launch_bounds__ of the local size; the seqlen
// extent lands on gridDim.z (max 65535), the launcher checks it. Our code, not a tinygrad dump; no bug found.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Sizes: a second 8192-token prefill chunk after 512 cached tokens, a 4-token step at position 4093, 999 tokens
// at 77.
/* kerntune:
args  = ["data0: out f16[seqlen * 4096]", "data1: in f16[seqlen * 4096]",
         "data2: in f32[(start_pos + seqlen) * 128] ~ uniform(-1, 1)", "start_pos: i32 = start_pos"]
sizes = [{ seqlen = 8192, start_pos = 512 }, { seqlen = 4, start_pos = 4093 }, { seqlen = 999, start_pos = 77 }]
grid  = ["2", "32", "seqlen"]
block = 32
*/
extern "C" __global__ void __launch_bounds__(32) E_n1_32_2_32_2(half* data0, const half* data1, const float* data2, const int start_pos) {
  int gidx0 = blockIdx.x; /* 2 */
  int gidx1 = blockIdx.y; /* 32 */
  int gidx2 = blockIdx.z; /* seqlen */
  int lidx0 = threadIdx.x; /* 32 */
  int alu0 = ((gidx0<<6)+(lidx0<<1));
  int alu1 = (alu0+(gidx1<<7)+(gidx2<<12));
  half2 val0 = *((half2*)((data1+alu1)));
  float2 val1 = *((float2*)((data2+(alu0+((gidx2+start_pos)<<7)))));
  float cast0 = ((float)(val0.x));
  float cast1 = ((float)(val0.y));
  *((half2*)((data0+alu1))) = make_half2(((half)(((cast0*val1.x)+((cast1*val1.y)*-1.0f)))), ((half)(((cast0*val1.y)+(cast1*val1.x)))));
}

// Host side of one run of the kernel as tinygrad's CUDAProgram launches it (cuLaunchKernel with global_size and
// local_size; the symbolic variables appended after the buffers). data0 / data1: device [seqlen, 32 * 128] half;
// data2: device freqs_cis [max_context, 128] float. Returns false when seqlen does not fit gridDim.z.
bool run_E_n1_32_2_32_2(half* data0, const half* data1, const float* data2, int seqlen, int start_pos,
                        cudaStream_t stream) {
  if (seqlen <= 0 || seqlen > 65535) return false;
  const dim3 global_size(2, 32, seqlen);
  const dim3 local_size(32, 1, 1);
  E_n1_32_2_32_2<<<global_size, local_size, 0, stream>>>(data0, data1, data2, start_pos);
  return true;
}
