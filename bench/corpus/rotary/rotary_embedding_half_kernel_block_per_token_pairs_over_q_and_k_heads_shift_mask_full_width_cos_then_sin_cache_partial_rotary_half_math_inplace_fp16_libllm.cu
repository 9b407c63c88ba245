// Rotary embedding as libllm writes it (ling0322/libllm, flint/cuda/rotary_embedding.cu: rotaryEmbeddingHalfKernel
// behind rotaryEmbedding(positions, query, key, rotaryCache); libllm is a C++ LLM inference library with its own
// tensor operators for CPU and CUDA), fp16, IN PLACE on query and key:
//   query [numTokens, numQueryHeads, headDim] and key [numTokens, numKeyHeads, headDim], each head contiguous, the
//   token rows queryTokenStride / keyTokenStride apart (views into a fused projection allowed); positions int64
//   [numTokens]; rotaryCache fp16 [maxPositions, 2 * rotaryDim]: per position a FULL-WIDTH cos row of rotaryDim
//   values, then a full-width sin row (cos[d] and cos[d + rotaryDim / 2] are separate entries, the rotate_half
//   table as built, not a half-width one). Only the first rotaryDim channels of a head are rotated (a model with a
//   partial rotary factor builds a narrower cache); the rest of the head is carried through untouched.
//   NeoX pairing (d, d + rotaryDim / 2):
//     x[d]        = x[d] * cos[d] - x[d + h] * sin[d]
//     x[d + h]    = x[d + h] * cos[d + h] + x[d] * sin[d + h]
//   in fp16 arithmetic: each product __hmul-rounded to half, then __hsub / __hadd rounded again.
//   Launch: one block per token, 256 threads striding over the token's (numQueryHeads + numKeyHeads) * halfDim
//   pairs, query heads first then key heads; the pair index splits into head = pair >> halfDimShift and
//   dim = pair & halfDimMask (halfDim a power of two, the host checks it and passes shift and mask); the position
//   is asserted to lie inside the cache.
// Changed: the Tensor API (CHECKs, getStride, getDataPtrCuda) became a launcher with device pointers, sizes and
// strides, and the launch takes a stream. No bug found.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cassert>
#include <cstdint>

namespace fl {
namespace op {
namespace cuda {

/* kerntune:
args  = ["positions: in i64[T] ~ randint(0, 4096)", "query: inout f16[T * HQ * D]", "key: inout f16[T * HK * D]",
         "rotaryCache: in f16[4096 * 2 * R] ~ uniform(-1, 1)", "queryTokenStride: i32 = HQ * D",
         "keyTokenStride: i32 = HK * D", "numQueryHeads: i32 = HQ", "numKeyHeads: i32 = HK", "headDim: i32 = D",
         "rotaryDim: i32 = R", "halfDimShift: i32 = log2(R / 2)", "halfDimMask: i32 = R / 2 - 1",
         "cacheStride: i32 = 2 * R", "maxPositions: i32 = 4096"]
sizes = [{ T = 8192, HQ = 32, HK = 8, D = 128, R = 128 }, { T = 4, HQ = 32, HK = 8, D = 128, R = 128 },
         { T = 999, HQ = 25, HK = 5, D = 96, R = 64 }]
grid  = "T"
block = 256
*/
__global__ void rotaryEmbeddingHalfKernel(const int64_t* __restrict__ positions, half* __restrict__ query,
                                          half* __restrict__ key, const half* __restrict__ rotaryCache,
                                          int queryTokenStride, int keyTokenStride, int numQueryHeads,
                                          int numKeyHeads, int headDim, int rotaryDim, int halfDimShift,
                                          int halfDimMask, int cacheStride, int maxPositions) {
  int token = blockIdx.x;
  // Only the first rotaryDim channels of each head are rotated; the rest is carried through.
  int halfDim = rotaryDim / 2;
  int pairsPerToken = (numQueryHeads + numKeyHeads) * halfDim;
  int position = static_cast<int>(positions[token]);
  assert(position >= 0 && position < maxPositions);

  const half* cache = rotaryCache + position * cacheStride;
  const half* cos = cache;
  const half* sin = cache + rotaryDim;

  for (int pair = threadIdx.x; pair < pairsPerToken; pair += blockDim.x) {
    int head = pair >> halfDimShift;
    int dim = pair & halfDimMask;
    half* vector;
    if (head < numQueryHeads) {
      vector = query + token * queryTokenStride + head * headDim;
    } else {
      vector = key + token * keyTokenStride + (head - numQueryHeads) * headDim;
    }

    half first = vector[dim];
    half second = vector[dim + halfDim];
    vector[dim] = __hsub(__hmul(first, cos[dim]), __hmul(second, sin[dim]));
    vector[dim + halfDim] = __hadd(__hmul(second, cos[dim + halfDim]), __hmul(first, sin[dim + halfDim]));
  }
}

// positions: [numTokens] int64; query: [numTokens, numQueryHeads, headDim] fp16, token rows queryTokenStride apart;
// key: [numTokens, numKeyHeads, headDim] fp16, rows keyTokenStride apart; rotaryCache: [maxPositions,
// 2 * rotaryDim] fp16 (cos row, then sin row). rotaryDim <= headDim, rotaryDim / 2 a power of two. In place.
void rotaryEmbedding(const int64_t* positions, half* query, half* key, const half* rotaryCache, int numTokens,
                     int numQueryHeads, int numKeyHeads, int headDim, int queryTokenStride, int keyTokenStride,
                     int rotaryDim, int maxPositions, cudaStream_t stream) {
  assert(headDim > 0 && headDim % 2 == 0);
  assert(rotaryDim > 0 && rotaryDim <= headDim && rotaryDim % 2 == 0);
  int halfDim = rotaryDim / 2;
  assert((halfDim & (halfDim - 1)) == 0 && "half rotary dimension must be a power of two");
  if (numTokens == 0) return;

  constexpr int NumThreads = 256;
  int halfDimShift = 0;
  while ((1 << halfDimShift) < halfDim) ++halfDimShift;
  const int cacheStride = 2 * rotaryDim;
  rotaryEmbeddingHalfKernel<<<numTokens, NumThreads, 0, stream>>>(
      positions, query, key, rotaryCache, queryTokenStride, keyTokenStride, numQueryHeads, numKeyHeads, headDim,
      rotaryDim, halfDimShift, halfDim - 1, cacheStride, maxPositions);
}

}  // namespace cuda
}  // namespace op
}  // namespace fl
