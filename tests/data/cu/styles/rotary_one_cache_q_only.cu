// NeoX rotary fp32 in place on the query only, positions + one cos/sin cache [max_pos, head_dim], no rot_dim argument
/* kerntune:
args  = ["pos: in i32[ntok] ~ randint(0, 2047)", "q: inout f32[ntok * nh * hd]", "cs: in f32[2048 * hd] ~ uniform(-1, 1)", "nh: i32 = nh", "hd: i32 = hd"]
sizes = [{ ntok = 256, nh = 8, hd = 64 }, { ntok = 19, nh = 3, hd = 128 }]
grid  = "ntok"
block = "128"
*/
__global__ void rope(const int* pos, float* q, const float* cs, int nh, int hd) {
  const int half = hd / 2;
  const float* c = cs + (size_t)pos[blockIdx.x] * hd;
  for (int i = threadIdx.x; i < nh * half; i += blockDim.x) {
    int h = i / half, j = i % half;
    float* v = q + ((size_t)blockIdx.x * nh + h) * hd;
    float x0 = v[j], x1 = v[j + half];
    v[j] = x0 * c[j] - x1 * c[half + j];
    v[j + half] = x1 * c[j] + x0 * c[half + j];
  }
}

void rope_q(const int* pos, float* q, const float* cs, int ntok, int nh, int hd, cudaStream_t stream) {
  rope<<<ntok, 128, 0, stream>>>(pos, q, cs, nh, hd);
}
