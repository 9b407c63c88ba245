// rotary in the Hugging Face style, fp32, out of place: out = x * cos + rotate_half(x) * sin, with cos and sin
// caches [max_pos, head_dim] whose halves repeat; one block per token, heads on blockIdx.y
/* kerntune:
args  = ["q: in f32[T * H * D]", "k: in f32[T * KV * D]", "cos: in f32[2048 * D] ~ uniform(-1, 1)",
         "sin: in f32[2048 * D] ~ uniform(-1, 1)", "pos: in i64[T] ~ randint(0, 2047)", "q_embed: out f32[T * H * D]",
         "k_embed: out f32[T * KV * D]", "H: i32 = H", "KV: i32 = KV", "head_dim: i32 = D"]
sizes = [{ T = 256, H = 8, KV = 2, D = 128 }, { T = 13, H = 3, KV = 3, D = 96 }]
grid  = ["T", "H + KV"]
block = "D"
*/
__global__ void rotate_half_kernel(const float* q, const float* k, const float* cos, const float* sin, const int64_t* pos,
                                   float* q_embed, float* k_embed, int H, int KV, int head_dim) {
  const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x, half = head_dim / 2;
  const float* x = h < H ? q + ((size_t)t * H + h) * head_dim : k + ((size_t)t * KV + (h - H)) * head_dim;
  float* y = h < H ? q_embed + ((size_t)t * H + h) * head_dim : k_embed + ((size_t)t * KV + (h - H)) * head_dim;
  const float c = cos[pos[t] * head_dim + d], s = sin[pos[t] * head_dim + d];
  const float rot = d < half ? -x[d + half] : x[d - half];
  y[d] = x[d] * c + rot * s;
}

void apply_rotary(const float* q, const float* k, const float* cos, const float* sin, const int64_t* pos,
                  float* q_embed, float* k_embed, int T, int H, int KV, int D, cudaStream_t stream) {
  rotate_half_kernel<<<dim3(T, H + KV), D, 0, stream>>>(q, k, cos, sin, pos, q_embed, k_embed, H, KV, D);
}
