// KV-cache quantization as KIVI writes it (jy-yuan/KIVI, quant/new_pack.py triton_quantize_and_pack_along_last_dim,
// used by its LlamaAttention_KIVI for the per-channel key cache and the full groups of the value cache). fp16 data
// viewed as [B * nh * D rows, T] (quantized along the LAST dim, T tokens for the transposed key cache), groups of
// group_size consecutive values of a row; asymmetric min / max: scale = (mx - mn) / (2^bits - 1) and the zero point
// is mn itself, both stored in fp16 [rows, T / group_size] (row-major, the data dtype, as KIVI returns them); every
// step rounded to fp16 as the torch ops do: mx - mn in fp16, then / max_int in fp16; x - mn in fp16, then / scale in
// fp16, clamp(0, max_int), round half to even (torch round_), to int32. Packing as _pack_along_last_dim: 32 / bits
// consecutive codes per int32, code i of the word at bit i * bits (the first value in the low bits), words
// [rows, T / (32 / bits)]. template <BITS> (2 / 4 / 8 from a host switch; KIVI-2 here: 16 codes per int32).
// Changed: KIVI runs three steps (the Triton _minmax_along_last_dim kernel, torch elementwise quantization, the
// Triton pack kernel); they are fused into one kernel with one thread per (row, group) pair over a flat index, 128
// threads per block (the BLOCK_SIZE_N = 128 pairs of one _minmax_along_last_dim program). Fixed: a constant group
// (mx == mn) divides by a zero scale and packs int32(NaN), undefined; such a group now packs code 0 (dequantizes to
// mn exactly). Requires T % group_size == 0 and group_size % (32 / bits) == 0 as KIVI asserts. Sizes: 8 x 32 heads
// x 128 channels over 1024 tokens; 1 x 2 x 128 over 32 (one residual block); 3 x 5 x 96 over 96.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace kivi {

/* kerntune:
args  = ["data: in f16[B * H * D * T]", "code: out i32[B * H * D * (T / 16)]",
         "scale: out f16[B * H * D * (T / 32)]", "mn: out f16[B * H * D * (T / 32)]",
         "N: i32 = B * H * D", "T: i32 = T", "group_size: i32 = 32"]
sizes = [{ B = 8, H = 32, D = 128, T = 1024 }, { B = 1, H = 2, D = 128, T = 32 }, { B = 3, H = 5, D = 96, T = 96 }]
grid  = ["cdiv(B * H * D * (T / 32), 128)", 1, 1]
block = 128
template_args = ["2"]
*/
template <int BITS>
__global__ void quantize_and_pack_along_last_dim_kernel(const __half* __restrict__ data,
                                                        int32_t* __restrict__ code,
                                                        __half* __restrict__ scale,
                                                        __half* __restrict__ mn,
                                                        const int N, const int T, const int group_size) {
  constexpr int feat_per_int = 32 / BITS;
  constexpr int max_int = (1 << BITS) - 1;
  const int num_groups = T / group_size;
  const int64_t bid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;  // (row, group) pair
  if (bid >= (int64_t)N * num_groups) return;
  const int64_t row = bid / num_groups;
  const int g = (int)(bid % num_groups);
  const __half* x = data + row * T + (int64_t)g * group_size;

  // min / max of the group
  float mx_val = __half2float(x[0]);
  float mn_val = mx_val;
  for (int i = 1; i < group_size; ++i) {
    const float v = __half2float(x[i]);
    mx_val = fmaxf(mx_val, v);
    mn_val = fminf(mn_val, v);
  }
  // scale = (mx - mn) / max_int, two fp16 roundings
  const __half range = __float2half(mx_val - mn_val);
  const __half s = __float2half(__half2float(range) / (float)max_int);
  scale[bid] = s;
  mn[bid] = __float2half(mn_val);
  const float s_f = __half2float(s);

  // quantize and pack feat_per_int codes per int32
  int32_t* out = code + row * (T / feat_per_int) + (int64_t)g * (group_size / feat_per_int);
  for (int w = 0; w < group_size / feat_per_int; ++w) {
    uint32_t packed = 0;
    for (int i = 0; i < feat_per_int; ++i) {
      const float d = __half2float(__float2half(__half2float(x[w * feat_per_int + i]) - mn_val));  // data - mn
      float q = 0.f;
      if (s_f != 0.f) {
        q = __half2float(__float2half(d / s_f));  // div_(scale)
        q = fminf(fmaxf(q, 0.f), (float)max_int);  // clamp_(0, max_int)
      }
      const uint32_t qi = (uint32_t)rintf(q);  // round_(), to int32
      packed |= qi << (i * BITS);
    }
    out[w] = (int32_t)packed;
  }
}

// data: [B, nh, D, T] fp16 (device); code: [B, nh, D, T / (32 / bit)] int32; scale, mn: [B, nh, D, T / group_size]
// fp16. Returns -1 for an unsupported bit width.
int triton_quantize_and_pack_along_last_dim(const __half* data, int32_t* code, __half* scale, __half* mn, int B,
                                            int nh, int D, int T, int group_size, int bit, cudaStream_t stream) {
  const int N = B * nh * D;
  const int num_groups = T / group_size;
  const int BLOCK_SIZE_N = 128;
  const int64_t pairs = (int64_t)N * num_groups;
  const dim3 grid((unsigned)((pairs + BLOCK_SIZE_N - 1) / BLOCK_SIZE_N));
  const dim3 block(BLOCK_SIZE_N);
  switch (bit) {
    case 2:
      quantize_and_pack_along_last_dim_kernel<2><<<grid, block, 0, stream>>>(data, code, scale, mn, N, T, group_size);
      break;
    case 4:
      quantize_and_pack_along_last_dim_kernel<4><<<grid, block, 0, stream>>>(data, code, scale, mn, N, T, group_size);
      break;
    case 8:
      quantize_and_pack_along_last_dim_kernel<8><<<grid, block, 0, stream>>>(data, code, scale, mn, N, T, group_size);
      break;
    default:
      return -1;
  }
  return 0;
}

}  // namespace kivi
