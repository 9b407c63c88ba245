// Vocabulary softmax in the style of gpt2.cu (vnnm404/gpt2.cu, src/layers/softmax.cu: softmax_forward_device, run by
// the persistent megakernel of src/mk.cu as its OP 14 (logits -> probs) over the instruction ranges that
// schedule_instructions / add_instructions_1d build; gpt2.cu trains and runs GPT-2 in CUDA C as one megakernel of
// NUM_SM = 28 CTAs that each execute a stream of instructions), written as that one instruction kind:
//   probs, logits [B, S, V] fp32 (V = 50257, GPT-2's vocabulary, odd); softmax_forward_device(out, input, B, S, V,
//   blockIdx_x, shared_mem) handles ONE row bt = blockIdx_x with the whole CTA (256 threads) and takes its shared
//   memory as a POINTER into the megakernel's dynamic shared memory (shared_max = shared_mem[0..32),
//   shared_sum = shared_mem[32..64)), so the same device function serves the standalone kernel and the megakernel.
//   THE MEGAKERNEL'S WORK SPLIT: add_instructions_1d cuts the B * S rows into min(B * S, NUM_SM) instructions of
//   CONTIGUOUS, BALANCED row ranges (the first (B * S) % n get one row more) and instruction i runs on CTA i, which
//   loops for (b_x = start_b_x; b_x <= end_b_x; b_x++) over its rows: a persistent grid of at most 28 CTAs (the
//   project's NUM_SM constant, not the device's SM count), 256 threads each.
//   Per row, three passes over global memory: the max (fmaxf, xor-butterfly warp max, one slot per warp in shared
//   memory, warp 0 reduces the slots and lane 0 writes shared_max[0]), the sum of exp(x - max) the same way, then
//   out = exp(x - max) / sum with the exponential recomputed. The project builds with --use_fast_math: expf is
//   __expf (ex2.approx) and '/' the approximate division div.approx.ftz.f32 (written as that PTX instruction here).
// Fixed: the row offsets bt * dim are int32 products; past 2^31 logits (a batch of 64 x 1024 tokens over 50257
// classes: 3.3e9) they wrapped and the kernel read and wrote out of bounds: 64-bit here.
// Changed: the megakernel's instruction decode, barriers and profiling are not ported: the softmax instruction
// became a kernel of its own whose CTA i computes instruction i's range the way add_instructions_1d does on the
// host; its dynamic shared memory is the 64 floats the device function uses (the megakernel's is sized for its
// matmul tiles); a C++ launcher with device pointers, sizes and a stream. Probabilities are ~1/V (2e-5), far below
// the default absolute tolerance, hence the small atol.
#include <assert.h>
#include <stdint.h>
#include <math.h>
#include <cuda_runtime.h>

#define NUM_SM 28    // CTAs of the megakernel (include/gpt2/mk.h)
#define MK_THREADS 256

namespace gpt2 {

__device__ __forceinline__ float warpReduceMax(float val) {
  for (int offset = 16; offset > 0; offset >>= 1) val = fmaxf(val, __shfl_xor_sync(0xffffffff, val, offset));
  return val;
}

__device__ __forceinline__ float warpReduceSum(float val) {
  for (int offset = 16; offset > 0; offset >>= 1) val += __shfl_xor_sync(0xffffffff, val, offset);
  return val;
}

// x / y as --use_fast_math compiles it (-prec-div=false, -ftz=true): __fdividef's accuracy
__device__ __forceinline__ float fast_div(float x, float y) {
  float r;
  asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
}

// out, input: [batch_size, seq_len, dim]; one (batch, time) row per call, the CTA's threads over dim.
__device__ void softmax_forward_device(float* out, const float* input, int batch_size, int seq_len, int dim,
                                       int blockIdx_x, float* shared_mem) {
  const int bt = blockIdx_x;
  if (bt >= batch_size * seq_len) return;

  const float* inp_bt = input + (int64_t)bt * dim;  // 64-bit (fixed)
  float* out_bt = out + (int64_t)bt * dim;

  float* shared_max = shared_mem;       // 32 slots
  float* shared_sum = shared_mem + 32;  // 32 slots

  const int tid = threadIdx.x;
  const int warpId = tid / 32;
  const int laneId = tid % 32;

  // pass 1: the row's max
  float thread_max = -INFINITY;
  for (int i = tid; i < dim; i += blockDim.x) thread_max = fmaxf(thread_max, inp_bt[i]);
  const float warp_max = warpReduceMax(thread_max);
  if (laneId == 0) shared_max[warpId] = warp_max;
  __syncthreads();
  if (warpId == 0) {
    float val = (laneId < (blockDim.x + 31) / 32) ? shared_max[laneId] : -INFINITY;
    val = warpReduceMax(val);
    if (laneId == 0) shared_max[0] = val;
  }
  __syncthreads();
  const float max_val = shared_max[0];

  // pass 2: the sum of exponentials
  float thread_sum = 0.0f;
  for (int i = tid; i < dim; i += blockDim.x) thread_sum += __expf(inp_bt[i] - max_val);
  const float warp_sum = warpReduceSum(thread_sum);
  if (laneId == 0) shared_sum[warpId] = warp_sum;
  __syncthreads();
  if (warpId == 0) {
    float val = (laneId < (blockDim.x + 31) / 32) ? shared_sum[laneId] : 0.0f;
    val = warpReduceSum(val);
    if (laneId == 0) shared_sum[0] = val;
  }
  __syncthreads();
  const float sum_exp = shared_sum[0];

  // pass 3: the probabilities
  for (int i = tid; i < dim; i += blockDim.x) out_bt[i] = fast_div(__expf(inp_bt[i] - max_val), sum_exp);
}

/* kerntune:
args  = ["out: out f32[B * S * V]", "input: in f32[B * S * V]", "batch_size: i32 = B", "seq_len: i32 = S",
         "dim: i32 = V"]
sizes = [{ B = 1, S = 1024, V = 50257 }, { B = 4, S = 1, V = 50257 }, { B = 3, S = 333, V = 50257 }]
grid  = "min(B * S, 28)"
block = 256
smem  = 256
atol  = 1e-8
*/
__global__ void softmax_forward_mk(float* out, const float* input, int batch_size, int seq_len, int dim) {
  extern __shared__ float shared_mem[];
  // instruction blockIdx.x of add_instructions_1d(..., num_blocks = batch_size * seq_len)
  const int num_blocks = batch_size * seq_len;
  const int num_instructions = gridDim.x;
  const int blocks_per_instruction_low = num_blocks / num_instructions;
  const int extra = num_blocks % num_instructions;
  const int i = blockIdx.x;
  const int start_b_x = i * blocks_per_instruction_low + (i < extra ? i : extra);
  const int end_b_x = start_b_x + blocks_per_instruction_low + (i < extra) - 1;
  for (int b_x = start_b_x; b_x <= end_b_x; b_x++)
    softmax_forward_device(out, input, batch_size, seq_len, dim, b_x, shared_mem);
}

}  // namespace gpt2

// The megakernel's OP 14: probs = softmax(logits) over the last dimension. out, input device [B, S, V] fp32.
void softmax_forward_mk_launch(float* out, const float* input, int B, int S, int V, cudaStream_t stream) {
  const int num_blocks = B * S;
  if (num_blocks == 0) return;
  const int num_instructions = (num_blocks <= NUM_SM) ? num_blocks : NUM_SM;
  gpt2::softmax_forward_mk<<<num_instructions, MK_THREADS, 64 * sizeof(float), stream>>>(out, input, B, S, V);
}
