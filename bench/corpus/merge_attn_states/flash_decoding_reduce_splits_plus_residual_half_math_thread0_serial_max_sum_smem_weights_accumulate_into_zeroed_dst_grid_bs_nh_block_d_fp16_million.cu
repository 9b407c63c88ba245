// Split-KV reduction of a PQ-quantized KV-cache decoder as MILLION writes it (Zhaohui-Xu/MILLION,
// scripts/modeldb/bindings/Kernel.cuh: flash_decoding_reduce_kernel<cuscalar_t, Ns, d>, the last of three launches
// after flash_decoding_split_kernel (Ns splits over the product-quantized keys / values) and
// flash_decoding_residual_kernel (the recent, unquantized residual tokens written as slice Ns)), fp16:
//   src [bs, nh, Ns + 1, d] partial outputs, each already divided by its own exp-sum (normalized)
//   lse [bs, nh, Ns + 1] natural-log log-sum-exps stored in the SAME scalar type as the outputs (cuscalar_t = half)
//   dst [bs, nh, 1, d]: the result is ACCUMULATED into dst (torch::zeros on the host), dst += o_i * w_i per slice
//   grid (bs, nh), block (d, 1, 1): one block per (sequence, head), one thread per channel; everything in half
//   arithmetic (MILLION's core::Scalar::CuScalar functors: hexp, __hsub, __hadd, __hmul, __hdiv), so every step is
//   rounded to fp16: thread 0 finds the max lse serially (single_thread_reduce), the Ns + 1 weights
//   exp(lse_i - L) go to a __shared__ buffer, thread 0 sums them serially into a __shared__ denominator, and each
//   thread adds src_i * (w_i / denom) to dst in slice order with a global read-modify-write
//   offsets in int from bs, nh and the template sizes; Ns and d are template parameters registered by host macros
//   (here Ns = 16 splits, d = 128)
// The helpers (functors, serial reduce) are our own minimal stand-ins for MILLION's core/ headers; the torch
// wrapper is a plain launcher with device pointers and a stream. No bug found (all threads reach every barrier,
// blockDim.x == d by construction).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace core {
namespace Scalar {
namespace CuScalar {

template <typename T> struct add;
template <typename T> struct sub;
template <typename T> struct mul;
template <typename T> struct div;
template <typename T> struct exp;
template <typename T> struct max;

template <> struct add<half> { __device__ half operator()(half a, half b) const { return __hadd(a, b); } };
template <> struct sub<half> { __device__ half operator()(half a, half b) const { return __hsub(a, b); } };
template <> struct mul<half> { __device__ half operator()(half a, half b) const { return __hmul(a, b); } };
template <> struct div<half> { __device__ half operator()(half a, half b) const { return __hdiv(a, b); } };
template <> struct exp<half> { __device__ half operator()(half a) const { return hexp(a); } };
template <> struct max<half> { __device__ half operator()(half a, half b) const { return __hmax(a, b); } };

}  // namespace CuScalar
}  // namespace Scalar

namespace DeviceOps {

// one thread walks n values (MILLION's single_thread_reduce)
template <typename T, typename Op>
__device__ __forceinline__ T single_thread_reduce(const T* p, int n) {
	T acc = p[0];
	for (int i = 1; i < n; ++i) {
		acc = Op()(acc, p[i]);
	}
	return acc;
}

}  // namespace DeviceOps
}  // namespace core

namespace csc = core::Scalar::CuScalar;

/* kerntune:
args  = ["src: in f16[bs * nh * 17 * 128]", "lse: in f16[bs * nh * 17] ~ uniform(-4, 12)",
         "dst: inout f16[bs * nh * 128] ~ zeros", "bs: i32 = bs", "nh: i32 = nh"]
sizes = [{ bs = 512, nh = 32 }, { bs = 4, nh = 32 }, { bs = 37, nh = 28 }]
grid  = ["bs", "nh"]
block = 128
template_args = ["half", "16", "128"]
*/
template
<
	typename cuscalar_t,
	int Ns,
	int d
>
__global__ void flash_decoding_reduce_kernel
(
	const cuscalar_t * __restrict__ src, // shaped (bs, nh, Ns+1, d)
	const cuscalar_t * __restrict__ lse, // shaped (bs, nh, Ns+1)
	cuscalar_t * __restrict__ dst, // shaped (bs, nh, 1, d), zero-filled by the caller
	const int bs,
	const int nh
)
{
	/**
	 * launch: grid (bs, nh), block (d, 1, 1)
	 * shared: the max lse, the Ns+1 weights, their sum
	 */
	__shared__ cuscalar_t L;
	__shared__ cuscalar_t sum_buffer[Ns+1];
	__shared__ cuscalar_t scaling_denom;

	const int b = blockIdx.x;
	const int h = blockIdx.y;
	const int tid = threadIdx.x;

	const int src_offset = b * (nh*(Ns+1)*d) + h * ((Ns+1)*d);
	const int lse_offset = b * (nh*(Ns+1)) + h * (Ns+1);
	const int dst_offset = b * (nh*d) + h * d;

	// L = max over the slices of lse[b][h]
	if (tid == 0) {
		L = core::DeviceOps::single_thread_reduce<cuscalar_t, csc::max<cuscalar_t>>(lse + lse_offset, Ns+1);
	}
	__syncthreads();

	// unnormalized weight of each slice
	for (int i = tid; i < Ns+1; i += blockDim.x) {
		sum_buffer[i] = csc::exp<cuscalar_t>()(csc::sub<cuscalar_t>()(lse[lse_offset + i], L));
	}
	__syncthreads();

	if (tid == 0) {
		scaling_denom = core::DeviceOps::single_thread_reduce<cuscalar_t, csc::add<cuscalar_t>>(sum_buffer, Ns+1);
	}
	__syncthreads();

	// dst += src_i * (w_i / denom), slice by slice
	for (int i = 0; i < Ns+1; ++i) {
		dst[dst_offset + tid] = csc::add<cuscalar_t>()(dst[dst_offset + tid],
			csc::mul<cuscalar_t>()(src[src_offset + i*d + tid], csc::div<cuscalar_t>()(sum_buffer[i], scaling_denom)));
	}
}

// partial_out: device (bs, nh, Ns+1, d); partial_lse: (bs, nh, Ns+1); out: (bs, nh, 1, d), zero-filled.
template <typename cuscalar_t, int Ns, int d>
void flash_decoding_reduce(const cuscalar_t *partial_out, const cuscalar_t *partial_lse, cuscalar_t *out,
                           int bs, int nh, cudaStream_t stream)
{
	dim3 reduce_grid(bs, nh);
	dim3 reduce_block(d, 1, 1);
	flash_decoding_reduce_kernel<cuscalar_t, Ns, d><<<reduce_grid, reduce_block, 0, stream>>>(
		partial_out, partial_lse, out, bs, nh);
}

template void flash_decoding_reduce<half, 16, 128>(const half *, const half *, half *, int, int, cudaStream_t);
