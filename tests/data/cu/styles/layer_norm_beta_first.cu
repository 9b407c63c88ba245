// LayerNorm fp32, bias before weight in the argument list, warp per row
/* kerntune:
args  = ["inp: in f32[B * C]", "bias: in f32[C]", "weight: in f32[C]", "outp: out f32[B * C]", "B: i32 = B", "C: i32 = C"]
sizes = [{ B = 1024, C = 768 }, { B = 31, C = 1001 }]
grid  = "cdiv(B, 8)"
block = "256"
*/
__global__ void ln_forward(const float* inp, const float* bias, const float* weight, float* outp, int B, int C) {
  int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (warp >= B) return;
  const float* x = inp + (size_t)warp * C;
  float s = 0.f;
  for (int i = lane; i < C; i += 32) s += x[i];
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffff, s, o);
  float m = s / C, v = 0.f;
  for (int i = lane; i < C; i += 32) { float d = x[i] - m; v += d * d; }
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);
  float rs = rsqrtf(v / C + 1e-5f);
  for (int i = lane; i < C; i += 32) outp[(size_t)warp * C + i] = (x[i] - m) * rs * weight[i] + bias[i];
}

void layernorm_forward(const float* inp, const float* bias, const float* weight, float* outp, int B, int C) {
  ln_forward<<<(B + 7) / 8, 256>>>(inp, bias, weight, outp, B, C);
}
