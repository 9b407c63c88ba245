// GPT-J rotary bf16 in place on a fused qk buffer [T, (NQ + NK) * S] (the key heads after the query heads), cos and
// sin caches [1024, S / 2] chosen by int32 positions, a block per token.
#include <cuda_bf16.h>
/* kerntune:
args  = ["qk: inout bf16[T * (NQ + NK) * S]", "pos: in i32[T] ~ randint(0, 1024)", "cosc: in f32[1024 * S / 2] ~ uniform(-1, 1)", "sinc: in f32[1024 * S / 2] ~ uniform(-1, 1)", "NQ: i32 = NQ", "NK: i32 = NK", "S: i32 = S"]
sizes = [{ T = 64, NQ = 16, NK = 4, S = 128 }, { T = 7, NQ = 6, NK = 2, S = 64 }]
grid  = "T"
block = "128"
*/
__global__ void rope_qk_gptj(__nv_bfloat16* qk, const int* pos, const float* cosc, const float* sinc, int NQ, int NK,
                             int S) {
  const int half = S / 2;
  const float* c = cosc + (size_t)pos[blockIdx.x] * half;
  const float* s = sinc + (size_t)pos[blockIdx.x] * half;
  __nv_bfloat16* tok = qk + (size_t)blockIdx.x * (NQ + NK) * S;
  for (int i = threadIdx.x; i < (NQ + NK) * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    __nv_bfloat16* v = tok + (size_t)h * S;
    const float a = __bfloat162float(v[2 * j]), b = __bfloat162float(v[2 * j + 1]);
    v[2 * j] = __float2bfloat16(a * c[j] - b * s[j]);
    v[2 * j + 1] = __float2bfloat16(b * c[j] + a * s[j]);
  }
}

void rope_qk_gptj_launch(__nv_bfloat16* qk, const int* pos, const float* cosc, const float* sinc, int T, int NQ, int NK,
                         int S, cudaStream_t stream) {
  rope_qk_gptj<<<T, 128, 0, stream>>>(qk, pos, cosc, sinc, NQ, NK, S);
}
