// Per-token-group fp8 quantization with UE8M0 scales packed four to an int32, one warp per packed word: fp16 input,
// groups of 64, 8 lanes a group (one 16-byte load of 8 halves each), the warp's four groups are the word's four
// bytes, gathered into lane 0 by shuffles. Scales are powers of two through log2f (SGLang's scale_ue8m0), the byte
// log2 of the scale + 127, values divided by the scale. Row-major words [T, cdiv(G, 4)] over a flat word index;
// the bytes of a token's last word past its groups are 0. The packed scales come first among the arguments.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
/* kerntune:
args  = ["sw: out i32[T * cdiv(G, 4)]", "x: in f16[T * G * 64]", "xq: out u8[T * G * 64]", "T: i32 = T",
         "G: i32 = G", "eps: f32 = 1e-10"]
sizes = [{ T = 64, G = 28 }, { T = 7, G = 22 }, { T = 33, G = 13 }]
grid  = "cdiv(T * cdiv(G, 4), 8)"
block = "256"
*/
__global__ void quant_ue8m0_words(int* sw, const __half* x, __nv_fp8_e4m3* xq, int T, int G, float eps) {
  const int words = (G + 3) / 4;
  const int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // the warp's word, flat over the tokens
  if (w >= T * words) return;  // whole warps leave: the shuffles below keep the full mask
  const int lane = threadIdx.x % 32, sub = lane / 8, l = lane % 8;
  const int t = w / words, g = (w % words) * 4 + sub;
  const bool valid = g < G;
  const size_t base = ((size_t)t * G + g) * 64 + l * 8;
  float v[8];
  float amax = 0.f;
  if (valid) {
    const uint4 raw = *reinterpret_cast<const uint4*>(x + base);
    const __half* h = reinterpret_cast<const __half*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[i] = __half2float(h[i]);
      amax = fmaxf(amax, fabsf(v[i]));
    }
  }
  for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float sc = exp2f(ceilf(log2f(fmaxf(amax, eps) / 448.f)));
  if (valid) {
#pragma unroll
    for (int i = 0; i < 8; ++i) xq[base + i] = __nv_fp8_e4m3(fminf(fmaxf(v[i] / sc, -448.f), 448.f));
  }
  const unsigned byte = valid ? (unsigned)((int)log2f(sc) + 127) : 0u;
  unsigned word = byte;
  for (int k = 1; k < 4; ++k) word |= __shfl_sync(0xffffffffu, byte, 8 * k) << (8 * k);
  if (lane == 0) sw[w] = (int)word;
}

void quant_ue8m0_words_launch(int* sw, const __half* x, __nv_fp8_e4m3* xq, int T, int G, float eps, cudaStream_t st) {
  const int words = T * ((G + 3) / 4);
  quant_ue8m0_words<<<(words + 7) / 8, 256, 0, st>>>(sw, x, xq, T, G, eps);
}
