// The MoE dispatch ("fast encode") of Microsoft Tutel (tutel/jit_kernels/sparse.py, create_forward: the kernel
// behind fast_encode / moe.fast_dispatcher), fp32: after top-k gating each token i has, for one of its k choices, an
// expert indices1_s[i], a slot locations1_s[i] inside that expert's capacity and a gate value gates1_s[i]; the token's
// row, scaled by its gate, is scattered into the expert-major dispatch buffer
//   dispatched_input[indices1_s[i] * capacity + locations1_s[i], :] += gates1_s[i] * reshaped_input[i, :]
// by atomicAdd, tokens whose slot is past the capacity (dropped by the capacity factor) or whose expert is negative
// skipped. The buffer is zeroed by the caller (torch.zeros) and the kernel is run once per k, accumulating.
// Tutel's conventions: generated CUDA source compiled at run time, extern "C" __global__ void execute with
// __launch_bounds__(1024) and its launch written as [thread_extent] comments that the JIT launcher reads: a FIXED grid
// of 128 blocks of 1024 threads, blocks striding over the tokens, threads over the hidden row by the literal 1024
// (#pragma unroll on a run-time loop), int indices, the row offset (index * capacity + location) * (hidden); __dtype
// is float here (__half2 for fp16 models). Tutel bakes capacity, samples and hidden into the source as #defines per
// shape; here they are arguments, so that one compiled kernel serves the three size sets.
// Inputs: experts randint(0, experts), slots randint(0, 1.25 * capacity) so that about a fifth are dropped; slots
// that collide add up (by atomicAdd, in whatever order).
#include <cuda_runtime.h>

/* kerntune:
args  = ["gates1_s: in f32[samples] ~ uniform(0, 1)", "indices1_s: in i32[samples] ~ randint(0, experts)",
         "locations1_s: in i32[samples] ~ randint(0, capacity + capacity / 4)",
         "reshaped_input: in f32[samples * hidden]", "dispatched_input: inout f32[experts * capacity * hidden] ~ zeros",
         "samples: i32 = samples", "hidden: i32 = hidden", "capacity: i32 = capacity"]
sizes = [{ samples = 8192, hidden = 4096, experts = 8, capacity = 1280 },
         { samples = 4, hidden = 4096, experts = 8, capacity = 4 },
         { samples = 1001, hidden = 1027, experts = 16, capacity = 79 }]
grid  = 128
block = 1024
*/
extern "C" __global__ __launch_bounds__(1024) void execute(float* __restrict__ gates1_s,
                                                           int* __restrict__ indices1_s,
                                                           int* __restrict__ locations1_s,
                                                           float* __restrict__ reshaped_input,
                                                           float* __restrict__ dispatched_input,
                                                           int samples, int hidden, int capacity) {
  // [thread_extent] blockIdx.x = 128
  // [thread_extent] threadIdx.x = 1024

  for (int i = blockIdx.x; i < samples; i += gridDim.x)
    if (locations1_s[i] < capacity && indices1_s[i] >= 0) {
#pragma unroll
      for (int j = threadIdx.x; j < hidden; j += 1024)
        atomicAdd(&dispatched_input[(indices1_s[i] * capacity + locations1_s[i]) * (hidden) + j],
                  gates1_s[i] * reshaped_input[i * (hidden) + j]);
    }
}

// One k of the top-k dispatch: reshaped_input [samples, hidden], dispatched_input [experts * capacity, hidden]
// (zeroed by the caller), gates / indices / locations [samples]; device pointers. The launch is the generated
// source's [thread_extent]: 128 x 1024.
void fast_encode_forward(float* gates1_s, int* indices1_s, int* locations1_s, float* reshaped_input,
                         float* dispatched_input, int samples, int hidden, int capacity, cudaStream_t stream) {
  const dim3 blocks(128), threads(1024);
  execute<<<blocks, threads, 0, stream>>>(gates1_s, indices1_s, locations1_s, reshaped_input, dispatched_input,
                                          samples, hidden, capacity);
}
