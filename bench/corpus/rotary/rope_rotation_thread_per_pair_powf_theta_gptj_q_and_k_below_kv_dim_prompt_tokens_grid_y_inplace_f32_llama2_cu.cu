// RoPE in the style of rogerallen's llama2.cu (rogerallen/llama2.cu, run.cu: RoPe_rotation_kernel behind
// RoPe_rotation, the CUDA port of Karpathy's llama2.c forward pass), fp32:
//   sq [dim] query and sk [kv_dim] key of the current token rotated IN PLACE, llama2.c's layout: the heads side by
//   side, GPT-J INTERLEAVED pairs (i, i + 1) with i even; head_dim = i % head_size, freq = 1 / powf(10000,
//   head_dim / (float)head_size), val = pos * freq, fcr = cosf(val), fci = sinf(val) computed per pair on the
//   fly (no table); one thread per pair of the query, rotn = i < kv_dim ? 2 : 1: the threads below kv_dim also
//   rotate the key (GQA: the key is shorter than the query); argument order pos, sq, sk, kv_dim, head_size
//   changed: llama2.cu runs one token per forward (<<<1, dim / 2>>>); here the prompt is fed as a chunk of
//   n_tokens rows (q [n_tokens, dim], k [n_tokens, kv_dim]) at positions pos .. pos + n_tokens - 1, one token per
//   gridDim.y; pos stays the scalar argument of the original
// Fixed: the original launch is ONE block of dim / 2 threads, which fails for dim > 2048 (Llama-2 7B: 4096 / 2 =
// 2048 threads > 1024); the launcher now uses divUp(dim / 2, num_threads_med = 256) blocks on x, with the
// i < dim guard that the extra threads of the last block need. int indices as in the original.
#include <cuda_runtime.h>

#include <cmath>

int divUp(int a, int b) {
    return (a - 1) / b + 1;
}

const int num_threads_med = 256;

/* kerntune:
args  = ["pos: i32 = 100", "sq: inout f32[n_tokens * dim]", "sk: inout f32[n_tokens * kv_dim]", "dim: i32 = dim",
         "kv_dim: i32 = kv_dim", "head_size: i32 = 128"]
sizes = [{ n_tokens = 4096, dim = 4096, kv_dim = 1024 }, { n_tokens = 1, dim = 4096, kv_dim = 4096 },
         { n_tokens = 333, dim = 3456, kv_dim = 384 }]
grid  = ["cdiv(dim / 2, 256)", "n_tokens"]
block = 256
*/
__global__ void RoPe_rotation_kernel(int pos, float *sq, float *sk, int dim, int kv_dim, int head_size) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * 2;
    if (i >= dim) return;
    int t = blockIdx.y; // token of the chunk
    float *q = sq + t * dim;
    float *k = sk + t * kv_dim;
    int head_dim = i % head_size;
    float freq = 1.0f / powf(10000.0f, head_dim / (float)head_size);
    float val = (pos + t) * freq;
    float fcr = cosf(val);
    float fci = sinf(val);
    int rotn = i < kv_dim ? 2 : 1; // how many vectors? 2 = q & k, 1 = q only
    for (int v = 0; v < rotn; v++) {
        float* vec = v == 0 ? q : k; // the vector to rotate (query or key)
        float v0 = vec[i];
        float v1 = vec[i+1];
        vec[i]   = v0 * fcr - v1 * fci;
        vec[i+1] = v0 * fci + v1 * fcr;
    }
}

// s_q: device [n_tokens, dim], s_k: device [n_tokens, kv_dim] fp32, rotated in place for positions pos ...
void RoPe_rotation(int pos, float *s_q, float *s_k, int n_tokens, int dim, int kv_dim, int head_size,
                   cudaStream_t stream) {
    dim3 grid(divUp(dim / 2, num_threads_med), n_tokens);
    RoPe_rotation_kernel<<<grid, num_threads_med, 0, stream>>>(pos, s_q, s_k, dim, kv_dim, head_size);
}
