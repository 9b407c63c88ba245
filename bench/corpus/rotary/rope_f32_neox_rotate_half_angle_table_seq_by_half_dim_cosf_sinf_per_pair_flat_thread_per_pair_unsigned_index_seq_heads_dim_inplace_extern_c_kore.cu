// RoPE as KORE writes it (KidIkaros/KORE, a Rust ML framework: crates/kore-kernels/src/cuda/kernels/rope.cu,
// extern "C" rope_f32, compiled to PTX and launched from Rust). data [seq_len, num_heads, head_dim] fp32 rotated IN
// PLACE; the table freqs [seq_len, head_dim / 2] holds ANGLES (position * theta^(-2i / head_dim), built by the
// companion rope_freqs_f32 for positions 0 .. seq_len - 1), not cos / sin: every thread calls cosf / sinf itself.
// NeoX / rotate-half pairing (i, i + head_dim / 2) although the file's comment speaks of pairs (2i, 2i + 1); the row
// of the table is the token's index in the sequence, the same for every head. Flat 1-D index, ONE THREAD PER PAIR:
// idx -> (seq, head, pair) by % and / on unsigned int, early return past seq_len * num_heads * head_dim / 2; all
// indices 32-bit unsigned; argument order (data, freqs, seq_len, num_heads, head_dim). Changed: the Rust launch is
// written as a C++ launcher with 256 threads and a grid of ceil(pairs / 256) (an assumption: the Rust side was
// not read); no bug found. Sizes: 8192 tokens x 32 heads x 128, decode 4 x 32 x 128, 999 x 14 x 80; angles drawn
// uniform(0, 4096) like positions up to 4096 times frequencies up to 1.
#include <cuda_runtime.h>

extern "C" {

/* kerntune:
args  = ["data: inout f32[S * H * D]", "freqs: in f32[S * D / 2] ~ uniform(0, 4096)", "seq_len: u32 = S",
         "num_heads: u32 = H", "head_dim: u32 = D"]
sizes = [{ S = 8192, H = 32, D = 128 }, { S = 4, H = 32, D = 128 }, { S = 999, H = 14, D = 80 }]
grid  = "cdiv(S * H * (D / 2), 256)"
block = 256
*/
__global__ void rope_f32(
    float* __restrict__ data,
    const float* __restrict__ freqs,
    unsigned int seq_len,
    unsigned int num_heads,
    unsigned int head_dim
) {
    unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int half_dim = head_dim / 2;
    unsigned int total = seq_len * num_heads * half_dim;

    if (idx >= total) return;

    // flat index -> (seq, head, pair)
    unsigned int pair = idx % half_dim;
    unsigned int head = (idx / half_dim) % num_heads;
    unsigned int seq = idx / (half_dim * num_heads);

    // rotation angle of this position and frequency
    float freq = freqs[seq * half_dim + pair];
    float cos_val = cosf(freq);
    float sin_val = sinf(freq);

    unsigned int base = seq * num_heads * head_dim + head * head_dim;
    unsigned int i0 = base + pair;
    unsigned int i1 = base + pair + half_dim;

    float x0 = data[i0];
    float x1 = data[i1];

    data[i0] = x0 * cos_val - x1 * sin_val;
    data[i1] = x0 * sin_val + x1 * cos_val;
}

}  // extern "C"

// data: device [seq_len, num_heads, head_dim] fp32, rotated in place; freqs: device [seq_len, head_dim / 2] angles.
void kore_rope_f32(float* data, const float* freqs, unsigned int seq_len, unsigned int num_heads,
                   unsigned int head_dim, cudaStream_t stream) {
    const unsigned int n_pairs = seq_len * num_heads * (head_dim / 2);
    if (n_pairs == 0) return;
    const unsigned int threads = 256;
    const unsigned int blocks = (n_pairs + threads - 1) / threads;
    rope_f32<<<blocks, threads, 0, stream>>>(data, freqs, seq_len, num_heads, head_dim);
}
