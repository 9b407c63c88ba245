// fp8 e4m3 quantization in groups of 128 as TurboMind's quant_symm_row writes it: one token per block of 512
// threads walking the row 8 values a thread, the 16 threads of a group reducing its absolute maximum with xor
// shuffles; absmax floored at 1e-8, scale = absmax / qmax stored column-major [groups, tokens] with a leading
// dimension of its own (the tokens rounded up to 4), the values multiplied by qmax / absmax computed directly; qmax a
// float argument; the row leading dimensions of the output and the input arguments too.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

/* kerntune:
args  = ["out: out u8[num * dim]", "out_ld: i32 = dim", "scales: out f32[dim / 128 * round_up(num, 4)]",
         "scales_ld: i32 = round_up(num, 4)", "src: in f16[num * dim]", "src_ld: i32 = dim", "num: i32 = num",
         "dim: i32 = dim", "qmax: f32 = 448.0"]
sizes = [{ num = 4001, dim = 7168 }, { num = 9, dim = 2048 }]
grid  = "num"
block = "512"
*/
__global__ void quant_symm_row(__nv_fp8_e4m3* out, int out_ld, float* scales, int scales_ld, const __half* src,
                               int src_ld, int num, int dim, float qmax) {
  constexpr int kVec = 8, kGroup = 128, kThreadsPerGroup = kGroup / kVec;
  const int ti = blockIdx.x;
  for (int di = threadIdx.x * kVec; di < dim; di += blockDim.x * kVec) {
    float v[kVec];
    float amax = 0.f;
#pragma unroll
    for (int c = 0; c < kVec; ++c) {
      v[c] = __half2float(src[(long long)ti * src_ld + di + c]);
      amax = fmaxf(amax, fabsf(v[c]));
    }
#pragma unroll
    for (int o = kThreadsPerGroup / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    amax = fmaxf(amax, 1e-8f);
    const float scale = amax / qmax;
    const float inv_scale = qmax / amax;
    if (threadIdx.x % kThreadsPerGroup == 0) scales[(di / kGroup) * scales_ld + ti] = scale;
#pragma unroll
    for (int c = 0; c < kVec; ++c) out[(long long)ti * out_ld + di + c] = __nv_fp8_e4m3(v[c] * inv_scale);
  }
}

void quantize_symm(__nv_fp8_e4m3* out, float* scales, const __half* src, int num, int dim, cudaStream_t stream) {
  const int aligned = (num + 3) / 4 * 4;
  quant_symm_row<<<num, 512, 0, stream>>>(out, dim, scales, aligned, src, dim, num, dim, 448.f);
}
