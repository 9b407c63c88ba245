// NeoX rotary fp32 in place on query and key with no cache: inv_freq = 1 / base^(2i / rot) (Hugging Face's
// formula, TensorRT-LLM's order), sincosf of pos * inv_freq; a thread per (head, pair), heads of q then k.
/* kerntune:
args  = ["positions: in i32[T] ~ randint(0, 4096)", "query: inout f32[T * H * S]", "key: inout f32[T * K * S]",
         "base: f32 = 500000.0", "rot: i32 = R", "H: i32 = H", "K: i32 = K", "S: i32 = S"]
sizes = [{ T = 64, H = 8, K = 2, S = 128, R = 128 }, { T = 9, H = 5, K = 1, S = 80, R = 32 }]
grid  = "T"
block = "128"
*/
__global__ void rope_inv_freq(const int* positions, float* query, float* key, float base, int rot, int H, int K,
                              int S) {
  const int half = rot / 2;
  const float p = (float)positions[blockIdx.x];
  for (int i = threadIdx.x; i < (H + K) * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    float* v = h < H ? query + ((size_t)blockIdx.x * H + h) * S : key + ((size_t)blockIdx.x * K + (h - H)) * S;
    const float inv_freq = 1.0f / powf(base, (float)(2 * j) / (float)rot);
    float s, c;
    sincosf(p * inv_freq, &s, &c);
    const float x0 = v[j], x1 = v[j + half];
    v[j] = x0 * c - x1 * s;
    v[j + half] = x1 * c + x0 * s;
  }
}
