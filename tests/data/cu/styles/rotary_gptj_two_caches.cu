// GPT-J rotary fp16 in place on query and key, separate cos and sin caches [max_pos, rot / 2]
#include <cuda_fp16.h>
/* kerntune:
args  = ["positions: in i64[T] ~ randint(0, 1023)", "query: inout f16[T * H * S]", "key: inout f16[T * K * S]", "cos_c: in f16[1024 * R / 2] ~ uniform(-1, 1)", "sin_c: in f16[1024 * R / 2] ~ uniform(-1, 1)", "rot: i32 = R", "H: i32 = H", "K: i32 = K", "S: i32 = S"]
sizes = [{ T = 128, H = 16, K = 4, S = 128, R = 64 }, { T = 9, H = 5, K = 1, S = 64, R = 64 }]
grid  = "T"
block = "64"
*/
__global__ void rope_gptj(const int64_t* positions, __half* query, __half* key, const __half* cos_c, const __half* sin_c,
                          int rot, int H, int K, int S) {
  const int half = rot / 2;
  const __half* c = cos_c + positions[blockIdx.x] * half;
  const __half* s = sin_c + positions[blockIdx.x] * half;
  for (int i = threadIdx.x; i < (H + K) * half; i += blockDim.x) {
    int h = i / half, j = i % half;
    __half* v = h < H ? query + ((size_t)blockIdx.x * H + h) * S : key + ((size_t)blockIdx.x * K + (h - H)) * S;
    float x0 = __half2float(v[2 * j]), x1 = __half2float(v[2 * j + 1]);
    float cc = __half2float(c[j]), ss = __half2float(s[j]);
    v[2 * j] = __float2half(x0 * cc - x1 * ss);
    v[2 * j + 1] = __float2half(x1 * cc + x0 * ss);
  }
}

void rotary_gptj(const int64_t* positions, __half* query, __half* key, const __half* cos_c, const __half* sin_c,
                 int T, int rot, int H, int K, int S, cudaStream_t stream) {
  rope_gptj<<<T, 64, 0, stream>>>(positions, query, key, cos_c, sin_c, rot, H, K, S);
}
