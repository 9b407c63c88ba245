// AWQ int4 weight dequantization as llm-awq / AutoAWQ write it (dequantize_weights, the kernel the AWQ GEMM
// path falls back to for large batches; vendored by CTranslate2 in src/ops/awq/dequantize_gpu.cu and by vLLM as
// awq_dequantize): W[in_c, out_c] fp16 = (q - z) * s with
//   B       int32 [in_c, out_c / 8]     eight 4-bit weights per word in AWQ's packing order: the word's nibbles
//                                        0..7 (bits 4j..4j+3) hold output columns 0, 2, 4, 6, 1, 3, 5, 7 of the
//                                        word's 8 columns
//   zeros   int32 [in_c / G, out_c / 8] the 4-bit zero points, packed the same way
//   scaling_factors fp16 [in_c / G, out_c]
// The unpacking is the FasterTransformer / AWQ magic-number trick: lop3 merges (word & 0x000f000f) and (word &
// 0x00f000f0) (and the same of word >> 8) into the mantissa of fp16 1024 (0x6400), then sub.f16x2 1024 and
// fma.rn.f16x2 x 1/16 - 64 turn the half2 pairs into the values 0..15 -- this yields the logical column order
// without any shuffle. Then per half2: sub.f16x2 (q - z, exact) and fma.rn.f16x2 (x * s + 0, one rounding).
// Launch as the original: a 2-D grid of 8 x 8 thread tiles, one packed word (8 output columns) per thread,
// threadIdx.x over the packed columns, threadIdx.y over the input rows, __launch_bounds__(64); grid z the
// expert for stacked MoE weights. Written with bounds checks and a rounded-up grid so that shapes whose packed
// width or row count is not a multiple of 8 are covered (the original floors both).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace awq {

__inline__ __device__ uint4 dequantize_s4_to_fp16x2(uint32_t const& source) {
  uint4 result;

  uint32_t* h = reinterpret_cast<uint32_t*>(&result);
  uint32_t const i4s = reinterpret_cast<uint32_t const&>(source);

  // (a & b) | c for the lop3 look-up table
  static constexpr uint32_t immLut = (0xf0 & 0xcc) | 0xaa;
  static constexpr uint32_t BOTTOM_MASK = 0x000f000f;
  static constexpr uint32_t TOP_MASK = 0x00f000f0;
  static constexpr uint32_t I4s_TO_F16s_MAGIC_NUM = 0x64006400;

  // nibbles 2, 3, 6, 7 of the word are nibbles 0, 1, 4, 5 of the word shifted right by 8
  const uint32_t top_i4s = i4s >> 8;
  // elements (0, 4): nibbles 0 and 4 into the mantissa of 1024
  asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
               : "=r"(h[0])
               : "r"(i4s), "n"(BOTTOM_MASK), "n"(I4s_TO_F16s_MAGIC_NUM), "n"(immLut));
  // elements (1, 5): nibbles 1 and 5, still 16 times too large
  asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
               : "=r"(h[1])
               : "r"(i4s), "n"(TOP_MASK), "n"(I4s_TO_F16s_MAGIC_NUM), "n"(immLut));
  // elements (2, 6)
  asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
               : "=r"(h[2])
               : "r"(top_i4s), "n"(BOTTOM_MASK), "n"(I4s_TO_F16s_MAGIC_NUM), "n"(immLut));
  // elements (3, 7)
  asm volatile("lop3.b32 %0, %1, %2, %3, %4;\n"
               : "=r"(h[3])
               : "r"(top_i4s), "n"(TOP_MASK), "n"(I4s_TO_F16s_MAGIC_NUM), "n"(immLut));

  // half2 {1024, 1024}: 1024 + v - 1024 = v
  static constexpr uint32_t FP16_TOP_MAGIC_NUM = 0x64006400;
  // half2 {1 / 16, 1 / 16}
  static constexpr uint32_t ONE_SIXTEENTH = 0x2c002c00;
  // half2 {-64, -64}: (1024 + 16 v) / 16 - 64 = v
  static constexpr uint32_t NEG_64 = 0xd400d400;

  asm volatile("sub.f16x2 %0, %1, %2;\n" : "=r"(h[0]) : "r"(h[0]), "r"(FP16_TOP_MAGIC_NUM));
  asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(h[1]) : "r"(h[1]), "r"(ONE_SIXTEENTH), "r"(NEG_64));
  asm volatile("sub.f16x2 %0, %1, %2;\n" : "=r"(h[2]) : "r"(h[2]), "r"(FP16_TOP_MAGIC_NUM));
  asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(h[3]) : "r"(h[3]), "r"(ONE_SIXTEENTH), "r"(NEG_64));

  return result;
}

/* kerntune:
args  = ["B: in i32[in_c * out_c / 8] ~ randint(-2147483648, 2147483647)",
         "scaling_factors: in f16[in_c / G * out_c] ~ uniform(0.001, 0.02)",
         "zeros: in i32[in_c / G * out_c / 8] ~ randint(-2147483648, 2147483647)", "C: out f16[in_c * out_c]",
         "G: i32 = G", "in_c: i32 = in_c", "out_c: i32 = out_c"]
sizes = [{ in_c = 4096, out_c = 14336, G = 128 }, { in_c = 256, out_c = 4096, G = 128 },
         { in_c = 1000, out_c = 11000, G = 125 }]
grid  = ["cdiv(out_c / 8, 8)", "cdiv(in_c, 8)", 1]
block = [8, 8]
*/
__global__ void __launch_bounds__(64) dequantize_weights(const int* __restrict__ B,
                                                         const half* __restrict__ scaling_factors,
                                                         const int* __restrict__ zeros, half* __restrict__ C,
                                                         int G, int in_c, int out_c) {
  if (blockIdx.z > 0) {  // the next expert's matrices
    B = B + blockIdx.z * in_c * out_c / 8;
    scaling_factors = scaling_factors + blockIdx.z * in_c * out_c / G;
    zeros = zeros + blockIdx.z * in_c * out_c / G / 8;
    C = C + blockIdx.z * in_c * out_c;
  }
  static constexpr uint32_t ZERO = 0x0;

  const int N = out_c / 8;  // packed words per row
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (col >= N || row >= in_c) {
    return;
  }

  const int index1 = 8 * col + 8 * row * N;
  half* C_ptr2 = C + index1;

  const int index2 = col + row * N;
  const int* B_ptr2 = B + index2;

  const int index3 = col + (row / G) * N;
  const int* zeros_ptr2 = zeros + index3;
  const int index4 = 8 * col + (row / G) * N * 8;
  const half* scaling_factors_ptr2 = scaling_factors + index4;

  const uint32_t zeros_loaded = *(const uint32_t*)(zeros_ptr2);
  const uint4 B_loaded_zero = dequantize_s4_to_fp16x2(zeros_loaded);
  const uint4 B_loaded_scale = *(const uint4*)(scaling_factors_ptr2);

  const uint32_t B_loaded = *(const uint32_t*)(B_ptr2);
  uint4 B_loaded_fp16 = dequantize_s4_to_fp16x2(B_loaded);
  asm volatile("sub.f16x2 %0, %1, %2;\n" : "=r"(B_loaded_fp16.x) : "r"(B_loaded_fp16.x), "r"(B_loaded_zero.x));
  asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n"
               : "=r"(B_loaded_fp16.x)
               : "r"(B_loaded_fp16.x), "r"(B_loaded_scale.x), "r"(ZERO));
  asm volatile("sub.f16x2 %0, %1, %2;\n" : "=r"(B_loaded_fp16.y) : "r"(B_loaded_fp16.y), "r"(B_loaded_zero.y));
  asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n"
               : "=r"(B_loaded_fp16.y)
               : "r"(B_loaded_fp16.y), "r"(B_loaded_scale.y), "r"(ZERO));
  asm volatile("sub.f16x2 %0, %1, %2;\n" : "=r"(B_loaded_fp16.z) : "r"(B_loaded_fp16.z), "r"(B_loaded_zero.z));
  asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n"
               : "=r"(B_loaded_fp16.z)
               : "r"(B_loaded_fp16.z), "r"(B_loaded_scale.z), "r"(ZERO));
  asm volatile("sub.f16x2 %0, %1, %2;\n" : "=r"(B_loaded_fp16.w) : "r"(B_loaded_fp16.w), "r"(B_loaded_zero.w));
  asm volatile("fma.rn.f16x2 %0, %1, %2, %3;\n"
               : "=r"(B_loaded_fp16.w)
               : "r"(B_loaded_fp16.w), "r"(B_loaded_scale.w), "r"(ZERO));

  // 8 consecutive output columns
  const half* B_out = reinterpret_cast<const half*>(&B_loaded_fp16);
  for (int i = 0; i < 8; ++i) {
    *(C_ptr2 + i) = B_out[i];
  }
}

// qweight int32 [num_experts, in_c, out_c / 8], scales fp16 [num_experts, in_c / G, out_c], qzeros int32
// [num_experts, in_c / G, out_c / 8], out fp16 [num_experts, in_c, out_c]; out_c % 8 == 0, in_c % G == 0;
// device pointers.
void dequantize_awq(const int* qweight, const half* scales, const int* qzeros, half* out, int num_experts,
                    int in_c, int out_c, int G, cudaStream_t stream) {
  const int qout_c = out_c / 8;

  const int x_thread = 8;
  const int y_thread = 8;
  const int x_blocks = (qout_c + x_thread - 1) / x_thread;
  const int y_blocks = (in_c + y_thread - 1) / y_thread;

  dim3 num_blocks(x_blocks, y_blocks, num_experts);
  dim3 threads_per_block(x_thread, y_thread);  // packed columns x rows

  dequantize_weights<<<num_blocks, threads_per_block, 0, stream>>>(qweight, scales, qzeros, out, G, in_c, out_c);
}

}  // namespace awq
