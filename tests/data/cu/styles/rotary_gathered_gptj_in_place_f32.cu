// GPT-J rotary fp32 in place on the query only, cos and sin already gathered per token by the caller
// ([T, R / 2] each, no positions): one block per token, the destination pointer declared first and set later.
/* kerntune:
args  = ["q: inout f32[T * H * R]", "sin_t: in f32[T * R / 2] ~ uniform(-1, 1)", "cos_t: in f32[T * R / 2] ~ uniform(-1, 1)", "H: i32 = H", "R: i32 = R"]
sizes = [{ T = 64, H = 8, R = 64 }, { T = 7, H = 3, R = 32 }]
grid  = "T"
block = "128"
*/
__global__ void gptj_rope_gathered(float* q, const float* sin_t, const float* cos_t, int H, int R) {
  const int half = R / 2;
  for (int i = threadIdx.x; i < H * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    float* v;
    v = q + ((size_t)blockIdx.x * H + h) * R;
    const float c = cos_t[(size_t)blockIdx.x * half + j], s = sin_t[(size_t)blockIdx.x * half + j];
    const float a = v[2 * j], b = v[2 * j + 1];
    v[2 * j] = a * c - b * s;
    v[2 * j + 1] = b * c + a * s;
  }
}

void gptj_rope_gathered_launch(float* q, const float* sin_t, const float* cos_t, int T, int H, int R,
                               cudaStream_t stream) {
  gptj_rope_gathered<<<T, 128, 0, stream>>>(q, sin_t, cos_t, H, R);
}
