// Per-token-group int8 quantization, f32 input, a thread per group over a flat group index; scales stored by group
// column with the columns padded to a multiple of 8 tokens (the stride `ld` an argument, the padding never written).
/* kerntune:
args  = ["x: in f32[M * K]", "xq: out i8[M * K]", "s: out f32[K / gs * round_up(M, 8)]", "ngroups: i32 = M * K / gs", "gs: i32 = gs", "per_row: i32 = K / gs", "ld: i32 = round_up(M, 8)"]
sizes = [{ M = 96, K = 1024, gs = 64 }, { M = 13, K = 512, gs = 64 }]
grid  = "cdiv(M * K / gs, 128)"
block = "128"
*/
__global__ void quant_int8_cols(const float* x, signed char* xq, float* s, int ngroups, int gs, int per_row, int ld) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= ngroups) return;
  const float* src = x + (size_t)g * gs;
  float m = 1e-8f;
  for (int i = 0; i < gs; ++i) m = fmaxf(m, fabsf(src[i]));
  const float sc = m / 127.f;
  for (int i = 0; i < gs; ++i) xq[(size_t)g * gs + i] = (signed char)__float2int_rn(fminf(fmaxf(src[i] / sc, -128.f), 127.f));
  s[(g % per_row) * ld + g / per_row] = sc;
}

void quant_int8_cols_launch(const float* x, signed char* xq, float* s, int M, int K, int gs, cudaStream_t stream) {
  const int ngroups = M * K / gs;
  quant_int8_cols<<<(ngroups + 127) / 128, 128, 0, stream>>>(x, xq, s, ngroups, gs, K / gs, (M + 7) / 8 * 8);
}
