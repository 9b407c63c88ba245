// Gated GELU (T5 v1.1 / Flan-T5 / UL2 gated-gelu FFN) as NetEase-FuXi's EET (Easy and Efficient Transformer,
// csrc/core/activation_kernel.cu: gated_gelu<T> behind gated_gelu_kernel<T>) writes it, the fp16 specialization:
//   inner_gelu = gelu_tanh(inner_gelu) * inner_linear IN PLACE over the gate GEMM's output; the two GEMM outputs are
//   separate [m, n] buffers (neither pointer const)
//   packed half arithmetic: the buffers reinterpreted as half2, tmp = in1 * (C2 * in1 * in1 + B2) in half2, only the
//   tanh in float (per half, tanh()), cdf = A2 + A2 * make_half2(x, y), out = in1 * cdf * in2 in half2 (every step
//   rounded to fp16); file-scope constexpr float constants A = 0.5, B = sqrt(2 / pi), C = 0.044715 * sqrt(2 / pi)
//   launch: grid (m, fold_coeff) with fold_coeff = 1, 2, 4, ... 32 by the row length (n <= 2048, 4096, 8192, ...),
//   block n / fold_coeff halved for half (one half2 per thread), the kernel called with n / 2 (pairs per row);
//   idx = n * blockIdx.x + blockIdx.y * blockDim.x + threadIdx.x guarded by idx < m * n
// The launcher takes void* buffers and an unused act_type; n must be a multiple of 2 * fold_coeff (else EET drops the
// row's last pairs). The float template path is not written.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <iostream>

// constants for approximating the normal cdf
constexpr static float A = 0.5;
constexpr static float B = 0.7978845608028654;    // sqrt(2.0/M_PI)
constexpr static float C = 0.035677408136300125;  // 0.044715 * sqrt(2.0/M_PI)

/* kerntune:
args  = ["inner_gelu: inout f16[m * n]", "inner_linear: in f16[m * n]", "m: i32 = m", "n: i32 = n / 2"]
sizes = [{ m = 4096, n = 10240 }, { m = 4, n = 10240 }, { m = 1001, n = 2816 }]
# fold_coeff = the launcher's if-chain = next power of two >= ceil(n / 2048), written with min / max
grid  = ["m", "(1 + min(cdiv(n, 2048) - 1, 1) + 2 * min(max(cdiv(n, 2048) - 2, 0), 1) + 4 * min(max(cdiv(n, 2048) - 4, 0), 1) + 8 * min(max(cdiv(n, 2048) - 8, 0), 1) + 16 * min(max(cdiv(n, 2048) - 16, 0), 1))"]
block = "n / (1 + min(cdiv(n, 2048) - 1, 1) + 2 * min(max(cdiv(n, 2048) - 2, 0), 1) + 4 * min(max(cdiv(n, 2048) - 4, 0), 1) + 8 * min(max(cdiv(n, 2048) - 8, 0), 1) + 16 * min(max(cdiv(n, 2048) - 16, 0), 1)) / 2"
*/
__global__ void gated_gelu(half* inner_gelu, half* inner_linear, int m, int n) {
  const half2 A2 = __floats2half2_rn(A, A);
  const half2 B2 = __floats2half2_rn(B, B);
  const half2 C2 = __floats2half2_rn(C, C);

  half2* inner_gelu_ptr = (half2*)inner_gelu;
  half2* inner_linear_ptr = (half2*)inner_linear;

  int idx = n * blockIdx.x + blockIdx.y * blockDim.x + threadIdx.x;

  if (idx < m * n) {
    half2 in1 = inner_gelu_ptr[idx];
    half2 in2 = inner_linear_ptr[idx];
    half2 tmp = in1 * (C2 * in1 * in1 + B2);
    float x = tanh(__half2float(tmp.x));
    float y = tanh(__half2float(tmp.y));
    half2 cdf = A2 + A2 * make_half2(x, y);
    inner_gelu_ptr[idx] = in1 * cdf * in2;
  }
}

// inner_gelu (in/out), inner_linear: [m, n] half.
template <typename T>
void gated_gelu_kernel(void* inner_gelu, void* inner_linear, int m, int n, const int act_type,
                       const cudaStream_t stream) {
  int fold_coeff = 1;
  if (n <= 2048) {
    fold_coeff = 1;
  } else if (n <= 4096) {
    fold_coeff = 2;
  } else if (n <= 8192) {
    fold_coeff = 4;
  } else if (n <= 16384) {
    fold_coeff = 8;
  } else if (n <= 16384 * 2) {
    fold_coeff = 16;
  } else if (n <= 16384 * 4) {
    fold_coeff = 32;
  }

  dim3 grid(m, fold_coeff);
  dim3 block(n / fold_coeff);

  block.x /= 2;
  gated_gelu<<<grid, block, 0, stream>>>((T*)inner_gelu, (T*)inner_linear, m, n / 2);
}

template void gated_gelu_kernel<half>(void* inner_gelu, void* inner_linear, int m, int n, const int act_type,
                                      const cudaStream_t stream);
