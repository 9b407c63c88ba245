// Rotary embedding as Google XNNPACK's RoPE operator computes it (google/XNNPACK, src/operators/rope-nthc.c
// xnn_create/reshape/setup_rope_nthc_f32 behind the subgraph's xnn_define_rope, the task xnn_compute_rope in
// src/operator-run.c and the complex-multiply microkernel f32-vcmul), ported from the CPU library to CUDA, f32:
//   input, output [batch_size, tokens, heads, channels] f32 (NTHC), OUT OF PLACE
//   weights [tokens, channels] f32, one row per token position 0 .. tokens - 1 (no position ids; shared by the batch
//   and all heads): the first channels / 2 values are the real parts (cos), the last channels / 2 the imaginary
//   parts (sin)
//   the head's channels are a complex vector stored split in HALVES (real = x[0 : C/2], imaginary = x[C/2 : C],
//   i.e. NeoX-style pairs): vcmul: out_r = ar * br - ai * bi, out_i = ar * bi + ai * br, all in float
//   context fields as rope_context: scaled_channels = (channels / 2) << log2(sizeof(float)) (BYTES), batch_stride,
//   head_stride, sequence_stride in bytes, byte-offset pointer arithmetic through uintptr_t
// Launch: XNNPACK parallelizes xnn_compute_rope over a 3-D range (batch_size, heads, tokens) with pthreadpool, one
// vcmul call per (batch, head, token); here one CUDA block per task, grid (tokens, heads, batch_size), and the
// microkernel's element loop striped over the block's XNN_ROPE_THREADS = 64 threads by byte counts. Argument order
// of the setup call (input, weights, output) then the reshape sizes. Odd channels are rejected as in reshape
// (xnn_status_unsupported_parameter); no bug found.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#define XNN_ROPE_THREADS 64
#define XNN_LOG2_SIZEOF_FLOAT 2

struct rope_context {
  size_t scaled_channels;
  size_t batch_stride;
  size_t head_stride;
  size_t sequence_stride;
};

/* kerntune:
args  = ["input: in f32[batch_size * tokens * heads * channels]",
         "weights: in f32[tokens * channels] ~ uniform(-1, 1)",
         "output: out f32[batch_size * tokens * heads * channels]",
         "scaled_channels: u64 = channels / 2 * 4", "batch_stride: u64 = tokens * heads * channels * 4",
         "head_stride: u64 = channels * 4", "sequence_stride: u64 = heads * channels * 4"]
sizes = [{ batch_size = 4, tokens = 2048, heads = 32, channels = 128 },
         { batch_size = 8, tokens = 1, heads = 32, channels = 128 },
         { batch_size = 3, tokens = 77, heads = 7, channels = 78 }]
grid  = ["tokens", "heads", "batch_size"]
block = 64
*/
__global__ void xnn_compute_rope_f32_kernel(
    const float* input,
    const float* weights,
    float* output,
    size_t scaled_channels,
    size_t batch_stride,
    size_t head_stride,
    size_t sequence_stride)
{
  const size_t sequence_index = blockIdx.x;
  const size_t head_index = blockIdx.y;
  const size_t batch_index = blockIdx.z;

  const size_t input_offset =
    batch_index * batch_stride + sequence_index * sequence_stride + head_index * head_stride;
  const size_t weights_offset = sequence_index * scaled_channels * 2;

  // xnn_f32_vcmul_ukernel: batch = scaled_channels bytes of complex elements, halves split
  const size_t batch = scaled_channels;
  const float* ar = (const float*) ((uintptr_t) input + input_offset);
  const float* ai = (const float*) ((uintptr_t) ar + batch);
  const float* br = (const float*) ((uintptr_t) weights + weights_offset);
  const float* bi = (const float*) ((uintptr_t) br + batch);
  float* or_ = (float*) ((uintptr_t) output + input_offset);
  float* oi = (float*) ((uintptr_t) or_ + batch);

  for (size_t n = threadIdx.x * sizeof(float); n < batch; n += blockDim.x * sizeof(float)) {
    const size_t k = n / sizeof(float);
    const float va_r = ar[k];
    const float va_i = ai[k];
    const float vb_r = br[k];
    const float vb_i = bi[k];

    const float vacc_r = va_r * vb_r - va_i * vb_i;
    const float vacc_i = va_r * vb_i + va_i * vb_r;

    or_[k] = vacc_r;
    oi[k] = vacc_i;
  }
}

enum xnn_status {
  xnn_status_success = 0,
  xnn_status_invalid_parameter = 2,
  xnn_status_unsupported_parameter = 4,
};

// reshape + setup + run of an f32 rope_nthc operator in one call. input / output: device [batch_size, tokens,
// heads, channels]; weights: device [tokens, channels] (cos half, sin half).
enum xnn_status xnn_run_rope_nthc_f32(
    size_t batch_size,
    size_t tokens,
    size_t heads,
    size_t channels,
    const float* input,
    const float* weights,
    float* output,
    cudaStream_t stream)
{
  if (tokens == 0 || heads == 0 || channels == 0) {
    return xnn_status_invalid_parameter;
  }
  if (channels % 2 != 0) {
    return xnn_status_unsupported_parameter;
  }
  if (batch_size == 0) {
    return xnn_status_success;
  }

  const struct rope_context context = {
    /*scaled_channels=*/(channels / 2) << XNN_LOG2_SIZEOF_FLOAT,
    /*batch_stride=*/(tokens * heads * channels) << XNN_LOG2_SIZEOF_FLOAT,
    /*head_stride=*/channels << XNN_LOG2_SIZEOF_FLOAT,
    /*sequence_stride=*/(heads * channels) << XNN_LOG2_SIZEOF_FLOAT,
  };

  const dim3 range((unsigned) tokens, (unsigned) heads, (unsigned) batch_size);
  xnn_compute_rope_f32_kernel<<<range, XNN_ROPE_THREADS, 0, stream>>>(
    input, weights, output,
    context.scaled_channels, context.batch_stride, context.head_stride, context.sequence_stride);
  return xnn_status_success;
}
