// Attention-score softmax with a scale and a length mask in the style of tcop-pytorch (a PyTorch C++/CUDA extension
// of transformer ops: src/masked_softmax_cuda_kernel.cu, masked_softmax_cuda_forward_kernel<scalar_t> behind
// masked_softmax_cuda_forward, the MaskedSoftmax autograd function of its attention), f32:
//   input, output [B, H, Lq, Lk] (scores of one attention, contiguous); mask int32 [m0, m1] holds LENGTHS, not
//   0/1 flags: row (b, h, q) keeps keys [0, mask[b * (m0 > 1 ? m1 : 0) + q * (m1 > 1 ? 1 : 0)]) clipped to Lk, so
//   one length per batch (m1 = 1), per (batch, query) (m0 = B, m1 = Lq, the spec's case) or one for all; the scale
//   multiplies the raw score (x * scale) in every pass, inside the softmax
//   3-D grid (B, H, Lq) from the tensor's first three sizes, ONE WARP PER ROW (32 threads, __launch_bounds__(32)),
//   the row offset computed from gridDim; three passes over the kept keys: max of x * scale, then sum of
//   std::exp(x * scale - max), then output = exp(...) / sum (a division per value, exp recomputed); xor-shuffle
//   butterflies for max and sum; fp32 (AT_DISPATCH_FLOATING_TYPES: float and double, float here), unsigned sizes,
//   default stream
// Changed: the extension allocated the output with at::zeros_like and left the masked keys untouched; the
// launcher here has no allocation, so the kernel writes 0 to keys [length, Lk) itself.
// Fixed: the shuffles used the mask __ballot_sync(threadIdx.x < length), which leaves lanes that still execute the
// shuffle out of the mask (undefined) and lets kept lanes read lanes outside it when the length is below 32; all
// 32 lanes take part (lanes past the length carry -FLT_MAX and 0), so the full mask is used.
// Tolerance: probabilities of rows of up to 4096 keys are far below the default absolute tolerance; atol is 1e-6.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>

namespace {
/* kerntune:
args  = ["input: in f32[B * H * Lq * Lk]", "mask: in i32[B * Lq] ~ randint(1, Lk + 1)",
         "output: out f32[B * H * Lq * Lk]", "hidden_size: u32 = Lk", "m0: u32 = B", "m1: u32 = Lq",
         "scale: f32 = 0.125"]
sizes = [{ B = 8, H = 16, Lq = 512, Lk = 512 }, { B = 16, H = 32, Lq = 1, Lk = 4096 },
         { B = 3, H = 7, Lq = 77, Lk = 333 }]
grid  = ["B", "H", "Lq"]
block = 32
atol  = 1e-6
template_args = ["float"]
*/
template <typename scalar_t>
__global__ void __launch_bounds__(32) masked_softmax_cuda_forward_kernel(
    const scalar_t* __restrict__ input,
    const int* __restrict__ mask,
    scalar_t* __restrict__ output,
    unsigned int hidden_size,
    unsigned int m0,
    unsigned int m1,
    scalar_t scale) {

  const int tid = threadIdx.x;
  const unsigned int ibase = blockIdx.x * gridDim.y * gridDim.z * hidden_size +
                             blockIdx.y * gridDim.z * hidden_size +
                             blockIdx.z * hidden_size;

  const unsigned int mask_offset = blockIdx.x * (m0 > 1 ? m1 : 0) +
                                   blockIdx.z * (m1 > 1 ? 1 : 0);
  unsigned int mask_size = min(static_cast<unsigned int>(mask[mask_offset]), hidden_size);

  scalar_t max_x = -FLT_MAX;
  for (unsigned int i = tid; i < mask_size; i += blockDim.x) {
    max_x = fmaxf(max_x, input[ibase + i] * scale);
  }
  for (unsigned int i = 16; i > 0; i >>= 1) {
    max_x = max(max_x, __shfl_xor_sync(0xffffffff, max_x, i));
  }

  scalar_t exp_sum = 0;
  for (unsigned int i = tid; i < mask_size; i += blockDim.x) {
    exp_sum += std::exp(input[ibase + i] * scale - max_x);
  }
  for (unsigned int i = 16; i > 0; i >>= 1) {
    exp_sum += __shfl_xor_sync(0xffffffff, exp_sum, i);
  }

  for (unsigned int i = tid; i < mask_size; i += blockDim.x) {
    output[ibase + i] = std::exp(input[ibase + i] * scale - max_x) / exp_sum;
  }
  // masked keys (the extension's zeros_like output)
  for (unsigned int i = mask_size + tid; i < hidden_size; i += blockDim.x) {
    output[ibase + i] = 0;
  }
}
}  // namespace

// input, output: device [batch, heads, q_len, k_len] scores; mask: device int32 [mask_size0, mask_size1] key lengths
// (mask_size0 is 1 or batch, mask_size1 is 1 or q_len).
void masked_softmax_cuda_forward(const float* input, const int* mask, float* output, int batch, int heads, int q_len,
                                 int k_len, int mask_size0, int mask_size1, float scale) {
  const int threads = 32;
  const dim3 blocks(batch, heads, q_len);
  masked_softmax_cuda_forward_kernel<float><<<blocks, threads>>>(input, mask, output, k_len, mask_size0, mask_size1,
                                                                 scale);
}
