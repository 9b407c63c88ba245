// Blockwise NF4 quantization as bitsandbytes writes it (csrc/kernels.cu kQuantizeBlockwise, launched by
// quantizeBlockwise in csrc/ops.cu; the QLoRA 4-bit NormalFloat weight format):
//   the tensor is a FLAT array of n values cut into blocks of BLOCK_SIZE consecutive values (the last block may
//   be short); per block absmax = max |x| (fp32, stored: absmax[n / BLOCK_SIZE rounded up]),
//   q = the NF4 code (0..15) of x * (1 / absmax): the 16 NF4 levels are the quantiles of N(0, 1) normalized to
//   [-1, 1] (code 7 = 0.0, code 15 = 1.0), the code chosen by a decision tree on the midpoints between levels
//   (round to nearest level); two codes per byte, the EVEN element in the HIGH nibble; a short last block pads
//   with zeros, so an odd n ends with a byte whose low nibble is the code of 0 (7).
// bitsandbytes' kernel shape: template <T, BLOCK_SIZE, NUM_PER_TH, STOCHASTIC, DATA_TYPE> with the 8-bit
// dynamic-map argument code, the stochastic-rounding rand / rand_offset arguments and the 4-bit formats in one
// signature (this file has the deterministic NF4 case: code and rand are not read); THREADS = BLOCK_SIZE /
// NUM_PER_TH; cub::BlockLoad (warp transpose) of NUM_PER_TH values per thread with valid_items and a 0 default,
// cub::BlockReduce max, thread 0 storing absmax and publishing 1 / absmax through __shared__, cub::BlockStore
// of the packed bytes; one block of values per CTA, written as a loop over blocks with stride gridDim.x *
// BLOCK_SIZE. The launcher picks the instantiation from the blocksize argument (here 4096 .. 128; bitsandbytes
// sends 64 and 32 to a warp-sized variant not in this file); spec = blocksize 256: <half, 256, 2, 0, NF4>,
// 128 threads, grid ceil(n / 256).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_store.cuh>
#include <cfloat>
#include <cstdint>

// CCCL 2.8.2+ spells the max operator cuda::maximum<>{}, older versions cub::Max()
#if defined(CCCL_VERSION) && CCCL_VERSION >= 2008002
#include <cuda/functional>
#define BNB_MAX_OP cuda::maximum<>{}
#else
#define BNB_MAX_OP cub::Max()
#endif

typedef enum DataType_t {
  General8bit = 0,
  FP4 = 1,
  NF4 = 2,
} DataType_t;

// the NF4 code of x in [-1, 1]: thresholds are the midpoints of adjacent NF4 levels
__device__ unsigned char dQuantizeNF4(float x) {
  if (x > 0.03979015f)                  // codes 8..15
    if (x > 0.38931254f)                // 12..15
      if (x > 0.64278692f)              // 14..15
        if (x > 0.86147842f)
          return 0b1111;                // 1.0
        else
          return 0b1110;                // 0.7229568
      else if (x > 0.50166342f)
        return 0b1101;                  // 0.5626170
      else
        return 0b1100;                  // 0.4407098
    else if (x > 0.20352125f)           // 10..11
      if (x > 0.29201377f)
        return 0b1011;                  // 0.3379152
      else
        return 0b1010;                  // 0.2461123
    else if (x > 0.12025525f)
      return 0b1001;                    // 0.1609302
    else
      return 0b1000;                    // 0.0795803
  else if (x > -0.33967943f)            // codes 4..7
    if (x > -0.13791173f)               // 6..7
      if (x > -0.04552502f)
        return 0b0111;                  // 0.0
      else
        return 0b0110;                  // -0.0910500
    else if (x > -0.23460741f)
      return 0b0101;                    // -0.1847734
    else
      return 0b0100;                    // -0.2844414
  else if (x > -0.61063293f)            // 2..3
    if (x > -0.45999527f)
      return 0b0011;                    // -0.3949175
    else
      return 0b0010;                    // -0.5250731
  else if (x > -0.84809640f)
    return 0b0001;                      // -0.6961928
  else
    return 0b0000;                      // -1.0
}

/* kerntune:
args  = ["code: in f32[256]", "A: in f16[n]", "absmax: out f32[cdiv(n, 256)]", "out: out u8[cdiv(n, 2)]",
         "rand: in f32[1024]", "rand_offset: i32 = 0", "n: i32 = n"]
sizes = [{ n = 58720256 }, { n = 32768 }, { n = 4111297 }]
grid  = "cdiv(n, 256)"
block = 128
template_args = ["half", "256", "2", "0", "NF4"]
*/
template <typename T, int BLOCK_SIZE, int NUM_PER_TH, int STOCHASTIC, int DATA_TYPE>
__global__ void kQuantizeBlockwise(float* code, T* __restrict__ const A, float* absmax, unsigned char* out,
                                   float* __restrict__ const rand, const int rand_offset, const int n) {
  static_assert(DATA_TYPE == NF4 && STOCHASTIC == 0, "this file has the deterministic NF4 path only");

  const int n_full = gridDim.x * BLOCK_SIZE;
  const int base_idx = blockIdx.x * BLOCK_SIZE;
  int valid_items = 0;

  static constexpr int THREADS = BLOCK_SIZE / NUM_PER_TH;

  T vals[NUM_PER_TH];
  unsigned char qvals[NUM_PER_TH / 2];
  float local_abs_max = 0.0f;

  typedef cub::BlockLoad<T, THREADS, NUM_PER_TH, cub::BLOCK_LOAD_WARP_TRANSPOSE> LoadT;
  typedef cub::BlockStore<unsigned char, THREADS, NUM_PER_TH / 2, cub::BLOCK_STORE_WARP_TRANSPOSE> StoreChar;
  typedef cub::BlockReduce<float, THREADS> BlockReduce;

  __shared__ typename LoadT::TempStorage loadt;
  __shared__ typename StoreChar::TempStorage storec;
  __shared__ typename BlockReduce::TempStorage reduce;
  __shared__ float smem_absmax_value[1];

  for (int64_t i = base_idx; i < n_full; i += gridDim.x * BLOCK_SIZE) {
    valid_items = n - i > BLOCK_SIZE ? BLOCK_SIZE : static_cast<int>(n - i);
    local_abs_max = -FLT_MAX;

    __syncthreads();
    LoadT(loadt).Load(&(A[i]), vals, valid_items, (T)0.0f);

    // 1. the block's absmax, 2. its inverse broadcast, 3. normalize and quantize
#pragma unroll NUM_PER_TH
    for (int j = 0; j < NUM_PER_TH; j++)
      local_abs_max = fmaxf(local_abs_max, fabsf((float)vals[j]));

    local_abs_max = BlockReduce(reduce).Reduce(local_abs_max, BNB_MAX_OP);  // valid in thread 0

    if (threadIdx.x == 0) {
      smem_absmax_value[0] = 1.0f / local_abs_max;
      absmax[i / BLOCK_SIZE] = local_abs_max;
    }
    __syncthreads();

    local_abs_max = smem_absmax_value[0];

#pragma unroll NUM_PER_TH
    for (int j = 0; j < NUM_PER_TH / 2; j++) {
      qvals[j] = dQuantizeNF4(((float)vals[2 * j]) * local_abs_max) << 4;
      qvals[j] |= dQuantizeNF4(((float)vals[2 * j + 1]) * local_abs_max);
    }

    __syncthreads();
    StoreChar(storec).Store(&(out[i / 2]), qvals, (valid_items + 1) / 2);
  }
}

// A: n values; absmax: ceil(n / blocksize) floats; out: ceil(n / 2) bytes; code (256 floats) and rand are the
// 8-bit / stochastic arguments, unused by NF4. Device pointers.
template <typename T, int STOCHASTIC, int DATA_TYPE>
void quantizeBlockwise(float* code, T* A, float* absmax, unsigned char* out, float* rand, int rand_offset,
                       int blocksize, const int n, cudaStream_t stream) {
  int num_blocks = n / blocksize;
  num_blocks = n % blocksize == 0 ? num_blocks : num_blocks + 1;

  if (blocksize == 4096)
    kQuantizeBlockwise<T, 4096, 4, STOCHASTIC, DATA_TYPE>
        <<<num_blocks, 1024, 0, stream>>>(code, A, absmax, out, rand, rand_offset, n);
  else if (blocksize == 2048)
    kQuantizeBlockwise<T, 2048, 4, 0, DATA_TYPE><<<num_blocks, 512, 0, stream>>>(code, A, absmax, out, rand,
                                                                                 rand_offset, n);
  else if (blocksize == 1024)
    kQuantizeBlockwise<T, 1024, 4, 0, DATA_TYPE><<<num_blocks, 256, 0, stream>>>(code, A, absmax, out, rand,
                                                                                 rand_offset, n);
  else if (blocksize == 512)
    kQuantizeBlockwise<T, 512, 2, 0, DATA_TYPE><<<num_blocks, 256, 0, stream>>>(code, A, absmax, out, rand,
                                                                                rand_offset, n);
  else if (blocksize == 256)
    kQuantizeBlockwise<T, 256, 2, 0, DATA_TYPE><<<num_blocks, 128, 0, stream>>>(code, A, absmax, out, rand,
                                                                                rand_offset, n);
  else if (blocksize == 128)
    kQuantizeBlockwise<T, 128, 2, 0, DATA_TYPE><<<num_blocks, 64, 0, stream>>>(code, A, absmax, out, rand,
                                                                               rand_offset, n);
}

template void quantizeBlockwise<half, 0, NF4>(float* code, half* A, float* absmax, unsigned char* out, float* rand,
                                              int rand_offset, int blocksize, const int n, cudaStream_t stream);
