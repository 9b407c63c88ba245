// Rotary embedding as NNTile (Skoltech / AIRI's StarPU-based framework for training large networks on tiles;
// src/kernel/rope/cuda.cu, nntile::kernel::rope::cuda<T>, the CUDA codelet of its rope operation used by the
// Llama attention) writes it. NNTile tensors are in Fortran (column-major) order: a query / key tile
// (head_size, n_seq, n_batch, n_head) is seen by the kernel as a 2-by-m-by-n tensor: the PAIR (2i, 2i + 1) of
// adjacent channels fastest (GPT-J / complex pairing), then m = head_size / 2 * n_seq, the flattened shape of the
// sin and cos tiles (head_size / 2, n_seq), then n = n_batch * n_head. No position ids: the sin / cos tiles hold
// sin and cos of (position * inv_freq) for the tile's own positions, in the SAME dtype as the data (bf16 here),
// computed by the caller. For element i of the m*n pairs, j = i % m picks the angle:
//   dst[2i]     = cos[j] * src[2i] - sin[j] * src[2i+1]
//   dst[2i + 1] = sin[j] * src[2i] + cos[j] * src[2i+1]
// the math in T::repr_t (float for NNTile's bf16_t), one rounding at each store. Out of place. One thread per pair
// over a flat index, 256 threads, (m*n + 255) / 256 blocks; Index is int64_t; templated over T and explicitly
// instantiated (fp32, fp64, fp32_fast_tf32, bf16; NNTile's own wrapper types are written here as the CUDA types
// with a repr_t trait, spec = bf16).
// Fixed from NNTile: its kernel computed the flat pair index in an int (`int i = threadIdx.x + blockIdx.x *
// blockDim.x`) while m and n are 64-bit Index, so a tile past 2^31 pairs would wrap; the index is an Index here.
// sin / cos uniform(-1, 1).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace nntile {

using Index = std::int64_t;

// NNTile's scalar types carry repr_t, the type their arithmetic is done in.
template <typename T>
struct repr_of;
template <>
struct repr_of<float> { using type = float; };
template <>
struct repr_of<double> { using type = double; };
template <>
struct repr_of<__nv_bfloat16> { using type = float; };

namespace kernel::rope {

/* kerntune:
args  = ["m: i64 = head_size / 2 * n_seq", "n: i64 = n_batch_head",
         "sin: in bf16[head_size / 2 * n_seq] ~ uniform(-1, 1)", "cos: in bf16[head_size / 2 * n_seq] ~ uniform(-1, 1)",
         "src: in bf16[head_size * n_seq * n_batch_head]", "dst: out bf16[head_size * n_seq * n_batch_head]"]
sizes = [{ head_size = 128, n_seq = 4096, n_batch_head = 64 }, { head_size = 128, n_seq = 1, n_batch_head = 256 },
         { head_size = 96, n_seq = 333, n_batch_head = 25 }]
grid  = "cdiv(head_size / 2 * n_seq * n_batch_head, 256)"
block = 256
template_args = ["__nv_bfloat16"]
*/
template <typename T>
static __global__ void cuda_kernel(Index m, Index n, const T *sin, const T *cos, const T *src, T *dst)
/*! Apply RoPE to a 2-by-m-by-n src tensor and write the result into dst.
 *  sin, cos are tensors of m elements.
 *  dst[2i,j]   = cos[i] * src[2i,j] - sin[i] * src[2i+1,j]
 *  dst[2i+1,j] = sin[i] * src[2i,j] + cos[i] * src[2i+1,j]
 * */
{
    Index i = threadIdx.x + static_cast<Index>(blockIdx.x) * blockDim.x;
    if (i < m * n)
    {
        using Y = typename repr_of<T>::type;
        Index j = i % m;
        Y c{static_cast<Y>(cos[j])}, s{static_cast<Y>(sin[j])};
        Y a{static_cast<Y>(src[2 * i])}, b{static_cast<Y>(src[2 * i + 1])};
        dst[2 * i] = static_cast<T>(c * a - s * b);
        dst[2 * i + 1] = static_cast<T>(s * a + c * b);
    }
}

template <typename T>
void cuda(cudaStream_t stream, Index m, Index n, const T *sin, const T *cos, const T *src, T *dst) noexcept
{
    dim3 blocks((m * n + 255) / 256), threads(256);
    cuda_kernel<T><<<blocks, threads, 0, stream>>>(m, n, sin, cos, src, dst);
}

// Explicit instantiation
template void cuda<float>(cudaStream_t stream, Index m, Index n, const float *sin, const float *cos,
                          const float *src, float *dst) noexcept;

template void cuda<double>(cudaStream_t stream, Index m, Index n, const double *sin, const double *cos,
                           const double *src, double *dst) noexcept;

template void cuda<__nv_bfloat16>(cudaStream_t stream, Index m, Index n, const __nv_bfloat16 *sin,
                                  const __nv_bfloat16 *cos, const __nv_bfloat16 *src, __nv_bfloat16 *dst) noexcept;

}  // namespace kernel::rope
}  // namespace nntile
