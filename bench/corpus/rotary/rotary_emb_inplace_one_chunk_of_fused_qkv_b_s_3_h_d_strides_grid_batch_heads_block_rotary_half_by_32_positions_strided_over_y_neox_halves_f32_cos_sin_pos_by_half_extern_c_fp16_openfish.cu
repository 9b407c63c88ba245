// Rotary embedding as openfish writes it (warp9seq/openfish, src/rotary_emb_cuda.cuh rotary_emb launched by
// rotary_emb_cuda / openfish_rotary_emb_gpu in src/nn_cuda.cu; openfish is a C library of GPU kernels for nanopore
// basecalling, CRF beam-search decoding plus the pieces of the transformer basecaller models, called by
// slorado / dorado-style C++ front ends), fp16, IN PLACE on ONE chunk of a fused qkv activation:
//   qkv [batch, seqlen, 3, nheads, head_dim] fp16 as the in-projection writes it; the caller splits it with
//   qkv.chunk(3, 2) and calls the kernel once for the q chunk and once for the k chunk, passing the chunk's base
//   pointer and the strides of the whole tensor (stride_batch = seqlen * 3 * nheads * head_dim,
//   stride_seq = 3 * nheads * head_dim, stride_head = head_dim); the v chunk is never touched.
//   cos / sin: fp32 [max_seq_len, rotary_half], one row per position (t.outer(inv_freq) computed on the host), the
//   position being the token's index in the sequence (no position ids, no offset).
//   NeoX pairing (rot, rot + rotary_half), rot < rotary_half:
//     x0' = x0 * cos - x1 * sin,  x1' = x0 * sin + x1 * cos     (fp32 math, one rounding per store)
//   so the rotated channels are [0, 2 * rotary_half) of each head; the basecaller passes rotary_half = 32 for its
//   64-wide heads (full rotary); a narrower rotary_half leaves the tail of the head untouched.
//   Launch: one block per (batch, head), grid (batch_size, nheads); block (rotary_half, 32): threadIdx.x is the
//   pair index inside the head, threadIdx.y walks the positions with a stride of 32 (blockDim.y); threads whose
//   first position is past seqlen leave at once. Sizes and strides are uint64_t kernel arguments, the host API
//   takes ints; the API's argument order is (x, sin, cos) while the kernel's is (x, cos, sin).
// Changed: openfish launches on the default stream and calls cudaDeviceSynchronize() (checking errors before and
// after) on every call; the launcher here takes a stream and only checks the launch (cudaGetLastError); the header's
// #ifdef __cplusplus guards around extern "C" { } are dropped (this file is always C++). No bug found.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define checkCudaError()                                                                     \
  do {                                                                                       \
    cudaError_t err_ = cudaGetLastError();                                                   \
    if (err_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "openfish: cuda error %d at %s:%d\n", (int)err_, __FILE__, __LINE__); \
      std::exit(EXIT_FAILURE);                                                               \
    }                                                                                        \
  } while (0)

extern "C" {

/* kerntune:
args  = ["x: inout f16[B * S * 3 * H * D]", "_cos: in f32[S * R] ~ uniform(-1, 1)",
         "_sin: in f32[S * R] ~ uniform(-1, 1)", "seqlen: u64 = S", "stride_batch: u64 = S * 3 * H * D",
         "stride_seq: u64 = 3 * H * D", "stride_head: u64 = D", "rotary_half: u64 = R"]
sizes = [{ B = 64, S = 2048, H = 8, D = 64, R = 32 }, { B = 4, S = 1, H = 8, D = 64, R = 32 },
         { B = 3, S = 999, H = 5, D = 50, R = 25 }]
grid  = ["B", "H"]
block = ["R", 32]
bytes = "B * S * H * R * 8 + S * R * 8"
*/
__global__ void rotary_emb(half* x, const float* _cos, const float* _sin, const uint64_t seqlen,
                           const uint64_t stride_batch, const uint64_t stride_seq, const uint64_t stride_head,
                           const uint64_t rotary_half) {
  const uint64_t batch = blockIdx.x;
  const uint64_t head = blockIdx.y;
  const uint64_t rot = threadIdx.x;       // which pair of the head
  const uint64_t tid = threadIdx.y;       // first position of this thread
  const uint64_t nthreads = blockDim.y;   // position stride

  if (tid >= seqlen) return;

  // the first and the second half of the pair, at position 0
  half* first = x + batch * stride_batch + head * stride_head + rot;
  half* second = x + batch * stride_batch + head * stride_head + rotary_half + rot;

  for (int seq = tid; seq < seqlen; seq += nthreads) {
    const float c = _cos[seq * rotary_half + rot];
    const float s = _sin[seq * rotary_half + rot];

    half* o0 = first + seq * stride_seq;
    half* o1 = second + seq * stride_seq;

    const float x0 = __half2float(*o0);
    const float x1 = __half2float(*o1);

    *o0 = __float2half(x0 * c - x1 * s);
    *o1 = __float2half(x0 * s + x1 * c);
  }
}

// x_gpu: one chunk (q or k) of qkv [batch_size, seq_len, 3, n_heads, head_dim] fp16, modified in place; the strides
// are those of the whole qkv tensor, in elements. sin_gpu, cos_gpu: fp32 [>= seq_len, rotary_half]. Device pointers.
void openfish_rotary_emb_gpu(void* x_gpu, const void* sin_gpu, const void* cos_gpu, int batch_size, int seq_len,
                             int n_heads, int head_dim, int rotary_half, int stride_batch, int stride_seq,
                             int stride_head, cudaStream_t stream) {
  (void)head_dim;  // the rotated width comes from rotary_half
  int thread_h = 32;
  dim3 block_size(rotary_half, thread_h, 1);
  dim3 grid_size(batch_size, n_heads, 1);

  rotary_emb<<<grid_size, block_size, 0, stream>>>((half*)x_gpu, (const float*)cos_gpu, (const float*)sin_gpu,
                                                   seq_len, stride_batch, stride_seq, stride_head, rotary_half);
  checkCudaError();
}

}  // extern "C"
