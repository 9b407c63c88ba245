// RoPE as zeux/calm applies it to its key cache (src/infer.cu, kernel_rotate_sink<KVT>, run when the context
// window slides so that the kept "attention sink" tokens keep pace with the others), fp16 KV cache:
//   IN PLACE on the key cache of every layer, [n_layers][seq_len * kvd] halves in calm's TILED, TRANSPOSED key
//   layout: key (t, k) of a layer sits at t * 16 + seq_len * (k / 16) * 16 + (k % 16), i.e. 16-channel tiles with
//   all positions of a tile contiguous (the layout its attention-score loop reads)
//   the first kv_sink positions are rotated FORWARD BY ONE POSITION: angle = freq itself, freq =
//   exp2f(-theta_log2 * j_head / rotary_dim) with theta_log2 = log2(theta) from the host, 0 past rotary_dim;
//   GPT-J pairing (channels 2m, 2m + 1 adjacent), sincosf, fp32 math, one rounding per store
//   flat index: each thread one pair, i = (blockIdx.x * blockDim.x + threadIdx.x) * 2 over kv_sink * kvd, the
//   layer on blockIdx.y; grid (kv_sink * kvd / 64, n_layers), 32 threads; static kernel template <typename KVT>
//   (half or fp8 e5m2 in calm; spec = <half>); an unused leading uint64_t profiling token (PROF_TOKEN) kept, named
//   here since the spec needs names; device assert on the index
// The launcher is ours (calm launches it inline from its forward pass on its static stream); the size sets use
// calm's llama-style 32 layers. The large set rotates every cached position (a one-step context shift of the whole
// cache), the few-row set a sink of 4 tokens as calm does. No bug found.
#include <assert.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define PROF_TOKEN(bytes) ((0xCDAFull << 48) | (bytes))

/* kerntune:
args  = ["perf_token: u64 = 0", "kvd: i32 = kvd", "key_cache: inout f16[n_layers * seq_len * kvd]",
         "head_dim: i32 = head_dim", "kv_sink: i32 = kv_sink", "theta_log2: f32 = 13.287712",
         "seq_len: i32 = seq_len", "rotary_dim: i32 = head_dim"]
sizes = [{ n_layers = 32, seq_len = 4096, kv_sink = 4096, kvd = 1024, head_dim = 128 },
         { n_layers = 32, seq_len = 2048, kv_sink = 4, kvd = 1024, head_dim = 128 },
         { n_layers = 27, seq_len = 3001, kv_sink = 7, kvd = 640, head_dim = 128 }]
grid  = ["kv_sink * kvd / 64", "n_layers"]
block = "32"
template_args = ["half"]
*/
template <typename KVT>
__global__ static void kernel_rotate_sink(uint64_t perf_token, int kvd, KVT* key_cache, int head_dim, int kv_sink,
                                          float theta_log2, int seq_len, int rotary_dim) {
	int i = (blockIdx.x * blockDim.x + threadIdx.x) * 2;
	assert(i < kv_sink * kvd);

	int l = blockIdx.y;

	int j_head = i % head_dim;
	float freq = j_head >= rotary_dim ? 0.f : exp2f(-theta_log2 * (float)j_head / (float)rotary_dim);

	// rotate sink tokens forward by one position
	float fcr, fci;
	sincosf(freq, &fci, &fcr);

	size_t loff = (size_t)l * seq_len * kvd;
	KVT* kb = key_cache + loff;

	// k layout is transposed / tiled by 16 channels
	int t = i / kvd;
	int k = i % kvd;
	int o = t * 16 + seq_len * (k / 16) * 16 + (k % 16);

	float v0 = float(kb[o + 0]);
	float v1 = float(kb[o + 1]);

	float r0 = v0 * fcr - v1 * fci;
	float r1 = v0 * fci + v1 * fcr;

	kb[o + 0] = KVT(r0);
	kb[o + 1] = KVT(r1);
}

// key_cache: n_layers * seq_len * kv_dim halves on the device, calm's tiled layout; rotates positions
// 0 .. kv_sink - 1 of every layer by one position. kv_sink * kv_dim must be a multiple of 64.
extern "C" void rotate_sink_cuda(void* key_cache, int n_layers, int seq_len, int kv_sink, int kv_dim, int head_dim,
                                 int rotary_dim, float rope_theta, cudaStream_t stream) {
	assert(kv_sink * kv_dim % 64 == 0);
	uint64_t bytes = (uint64_t)n_layers * kv_sink * kv_dim * sizeof(half) * 2;
	kernel_rotate_sink<<<dim3(kv_sink * kv_dim / 64, n_layers), 32, 0, stream>>>(
	    PROF_TOKEN(bytes), kv_dim, (half*)key_cache, head_dim, kv_sink, log2f(rope_theta), seq_len, rotary_dim);
}
