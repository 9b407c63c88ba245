// SwiGLU (fp32) in the style of llama3.cuda (likejazz/llama3.cuda, llama3.cu: f_silu_elementwise_mul_w3_kernel
// behind f_silu_elementwise_mul_w3, the FFN non-linearity of this llama2.c-derived pure C/CUDA Llama 3 port):
//   IN PLACE on the run-state buffer hb = w1(x) (the gate), hb2 = w3(x) (the up projection) a separate buffer:
//   hb[i] = hb[i] * (1 / (1 + expf(-hb[i]))) * hb2[i], fp32 throughout, argument order shb, shb2, hidden_dim
//   flat 1-D, one element per thread, bounds check i < hidden_dim, int index; the launcher's divUp(a, b) =
//   (a - 1) / b + 1 and const int num_threads_small = 64 (the port's block for small kernels); default stream
//   the port runs one token at a time (hidden_dim elements); as the kernel is elementwise the launcher here is
//   given the whole [rows, hidden] activation and passes rows * hidden as the length (the decode set is one token)
// No bug found.
#include <cuda_runtime.h>

// Utility routine to divide a into ceiling of b parts
int divUp(int a, int b) {
    return (a - 1) / b + 1;
}

const int num_threads_small = 64;

/* kerntune:
args  = ["shb: inout f32[rows * hidden]", "shb2: in f32[rows * hidden]", "hidden_dim: i32 = rows * hidden"]
sizes = [{ rows = 2048, hidden = 14336 }, { rows = 1, hidden = 14336 }, { rows = 77, hidden = 2731 }]
grid  = "cdiv(rows * hidden, 64)"
block = 64
*/
__global__ void f_silu_elementwise_mul_w3_kernel(float *shb, float *shb2, int hidden_dim) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < hidden_dim) {
        float val = shb[i];
        // silu(x)=x*σ(x), where σ(x) is the logistic sigmoid
        val *= (1.0f / (1.0f + expf(-val)));
        // elementwise multiply with w3(x)
        val *= shb2[i];
        shb[i] = val;
    }
}

// hb, hb2: device buffers of rows * hidden_dim floats (w1(x) and w3(x)); hb receives silu(w1(x)) * w3(x)
void f_silu_elementwise_mul_w3(float *hb, float *hb2, int rows, int hidden_dim) {
    int n = rows * hidden_dim;
    f_silu_elementwise_mul_w3_kernel<<<divUp(n, num_threads_small), num_threads_small>>>(hb, hb2, n);
}
