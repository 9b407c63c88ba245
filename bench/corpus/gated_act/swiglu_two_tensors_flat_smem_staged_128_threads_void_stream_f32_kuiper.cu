// SwiGLU as KuiperLLama writes it (zjhellofss/KuiperLLama, a teaching LLM inference framework for Llama 2/3 and
// Qwen 2; kuiper/source/op/kernels/cuda/swiglu_kernel.cu, swiglu_kernel_cu_fp32 behind swiglu_kernel_cu, called by
// the SwiGLULayer of the FFN), fp32:
//   out = silu(in1) * in2 with in1 = w1(x) (the gate) and in2 = w3(x) (up) two separate tensors of the same size,
//   one flat index over input1.size() (Kuiper decodes one token at a time, so size = hidden_dim there; the large
//   size set below is a prefill-sized buffer), one element per thread, 128 threads, grid ceil(size / 128)
//   both operands staged through dynamic shared memory (2 * 128 floats: smem1 = gate, smem2 = up, carved from one
//   extern __shared__ array), a __syncthreads after the stores, silu = x * (1 / (1 + exp(-x))) written back into
//   smem1 before the multiply; the thread returns early (idx >= size) before the barrier
// Kuiper's conventions: namespace kernel, the launcher takes Tensors and a void* stream (nullptr: default stream,
// else static_cast<cudaStream_t>), two launch statements for the two cases. Tensors are replaced by device pointers
// and the element count.
#include <cuda_runtime.h>
#include <cstdint>

namespace kernel {

/* kerntune:
args  = ["size: i32 = tokens * hidden_dim", "in1: in f32[tokens * hidden_dim]", "in2: in f32[tokens * hidden_dim]",
         "out: out f32[tokens * hidden_dim]"]
sizes = [{ tokens = 4096, hidden_dim = 11008 }, { tokens = 1, hidden_dim = 11008 }, { tokens = 1001, hidden_dim = 2753 }]
grid  = "cdiv(tokens * hidden_dim, 128)"
block = 128
smem  = "128 * 4 * 2"
*/
__global__ void swiglu_kernel_cu_fp32(int size, const float* in1, const float* in2, float* out) {
  int tid = threadIdx.x;
  int idx = threadIdx.x + blockDim.x * blockIdx.x;
  if (idx >= size) {
    return;
  }
  extern __shared__ float shared_mem[];
  float* smem1 = shared_mem;               // gate
  float* smem2 = shared_mem + blockDim.x;  // up

  smem1[tid] = in1[idx];
  smem2[tid] = in2[idx];
  __syncthreads();

  float sigmoid = 1.0f / (1.0f + exp(-smem1[tid]));
  smem1[tid] = smem1[tid] * sigmoid;
  out[idx] = smem1[tid] * smem2[tid];
}

// input1 (gate), input2 (up), output: [size] fp32 device pointers.
void swiglu_kernel_cu(const float* input1, const float* input2, float* output, int32_t size, void* stream) {
  int threads = 128;
  int blocks = (size + threads - 1) / threads;
  const size_t shmem = threads * sizeof(float) * 2;
  if (!stream) {
    swiglu_kernel_cu_fp32<<<blocks, threads, shmem>>>(size, input1, input2, output);
  } else {
    cudaStream_t stream_ = static_cast<cudaStream_t>(stream);
    swiglu_kernel_cu_fp32<<<blocks, threads, shmem, stream_>>>(size, input1, input2, output);
  }
}

}  // namespace kernel
