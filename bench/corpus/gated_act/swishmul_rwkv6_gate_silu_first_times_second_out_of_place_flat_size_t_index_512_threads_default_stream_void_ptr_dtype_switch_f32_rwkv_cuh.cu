// The RWKV gate "swishmul" as rwkv.cuh writes it (harrisonvanderbyl/rwkv.cuh, include/tensor/operators/swishmul/
// swishmul.cuh swishmul_kernel behind Tensor::swishmul / swishmul_cuda_kernel; a header-only C++/CUDA RWKV v5/v6
// inference engine): c = silu(a) * b, written as a * b / (1 + exp(-a)) in one expression, fp32 only, OUT OF PLACE
// into a third tensor; in the v6 time-mix block a is the gate projection g and b the GroupNorm'd wkv output,
// [tokens, C] flattened. One thread per element, flat size_t index, 512 threads (size_t threads = 512, blocks =
// ceil(size / 512)), launched on the default stream; argument order (a, b, c, size); non-const float pointers; the
// host entry takes void* tensors and a TENSORTYPE and throws for anything but float32, kept as such.
// Changed: the std::runtime_error throw kept, tensor.h's TENSORTYPE reduced to the two cases used.
// No race or bug found. Sizes: 8192 x 4096, decode 4 x 2560, tail 999 x 3001.
#include <cuda_runtime.h>
#include <cstddef>
#include <stdexcept>

enum class TENSORTYPE { kFLOAT_32, kBFLOAT_16 };

/* kerntune:
args  = ["a: in f32[tokens * C]", "b: in f32[tokens * C]", "c: out f32[tokens * C]", "size: u64 = tokens * C"]
sizes = [{ tokens = 8192, C = 4096 }, { tokens = 4, C = 2560 }, { tokens = 999, C = 3001 }]
grid  = "cdiv(tokens * C, 512)"
block = 512
*/
__global__ void swishmul_kernel(float *a, float *b, float *c, size_t size) {
    // 32-bit block offset product widened to size_t, as written upstream (fine below 2^32 elements)
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= size) return;
    float gate = a[i];
    c[i] = gate * b[i] / (1.0f + exp(-gate));  // float overload of exp
}

// a, b, c: [tokens, C] float tensors on the device
void swishmul_cuda_kernel(void* gate, void* other, void* result, size_t size, TENSORTYPE dtype) {
    if (dtype != TENSORTYPE::kFLOAT_32)
        throw std::runtime_error("swishmul: only float32 is implemented on CUDA");

    size_t threads = 512;
    size_t blocks = (size + threads - 1) / threads;
    swishmul_kernel<<<blocks, threads>>>((float*)gate, (float*)other, (float*)result, size);
}
