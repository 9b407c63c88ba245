// Gated activation as SwiftTransformer writes it (LLMServe/SwiftTransformer, the C++ engine under DistServe;
// src/csrc/kernel/fused_activ_multiply.cu, fusedActivationMultiplyKernel<T, ACTIVATION_TYPE> behind
// fusedActivationMultiply, the LLaMA FFN's silu(w1 x) * (w3 x)), fp16:
//   output[i] = act(input1[i]) * input2[i] with the gate and the up projection as TWO SEPARATE flat arrays of n
//   elements (argument order output, input1, input2, n), no rows
//   pairs: the arrays are read and written as T2 (half2 for half, float2 for float, std::conditional_t), the loop
//   runs over n / 2 pairs, grid-stride with #pragma unroll 4 but a grid that already covers every pair
//   applyActivation<T, ActivationType> computes SiLU in fp32 (x / (1 + __expf(-x))) and rounds it to T; the
//   product is a T * T multiply (a half multiply, rounded again)
//   launch: 256 threads, grid (n / 2 + 255) / 256, default stream, activation chosen by a host switch over
//   ActivationType (RELU / SILU / GELU, each an instantiation; spec = <half, SILU>); n must be even
// The activation helpers are our own; the GELU branch is a tanh GELU in fp32. No bug found.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cassert>
#include <cstdint>
#include <type_traits>

namespace st::kernel {

enum class ActivationType { RELU, SILU, GELU };

template <typename T, ActivationType activation_type>
__forceinline__ __device__ T applyActivation(const T &x) {
	if constexpr (activation_type == ActivationType::RELU) {
		return x > (T)0 ? x : (T)0;
	} else if constexpr (activation_type == ActivationType::SILU) {
		const float xf = (float)x;
		return (T)(xf / (1.0f + __expf(-xf)));
	} else {
		const float xf = (float)x;
		const float inner = 0.7978845608f * (xf + 0.044715f * xf * xf * xf);
		return (T)(0.5f * xf * (1.0f + tanhf(inner)));
	}
}

/*
	fusedActivationMultiplyKernel

	output[i] = act(input1[i]) * input2[i], two elements per iteration
*/
/* kerntune:
args  = ["output: out f16[tokens * inter]", "input1: in f16[tokens * inter]", "input2: in f16[tokens * inter]",
         "n: i64 = tokens * inter"]
sizes = [{ tokens = 4096, inter = 11008 }, { tokens = 8, inter = 11008 }, { tokens = 37, inter = 10922 }]
grid  = "cdiv(tokens * inter / 2, 256)"
block = "256"
template_args = ["half", "st::kernel::ActivationType::SILU"]
*/
template <typename T, ActivationType ACTIVATION_TYPE>
__global__ void fusedActivationMultiplyKernel(
	T* output,
	const T* input1,
	const T* input2,
	int64_t n
) {
	typedef std::conditional_t<std::is_same_v<T, half>, half2, float2> T2;
	#pragma unroll 4
	for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n / 2; i += blockDim.x * gridDim.x) {
		T2 input1_elem = ((const T2*)input1)[i];
		T2 input2_elem = ((const T2*)input2)[i];
		T2 output_elem = {
			applyActivation<T, ACTIVATION_TYPE>(input1_elem.x) * input2_elem.x,
			applyActivation<T, ACTIVATION_TYPE>(input1_elem.y) * input2_elem.y
		};
		((T2*)output)[i] = output_elem;
	}
}

// output, input1 (gate), input2 (up): n elements each, device pointers; n even.
template <typename T>
void fusedActivationMultiply(
	T* output,
	const T* input1,
	const T* input2,
	int64_t n,
	ActivationType activation_type
) {
	assert(n % 2 == 0);
	int blockSize = 256;
	int gridSize = (n / 2 + blockSize - 1) / blockSize;
	switch (activation_type) {
		case ActivationType::RELU:
			fusedActivationMultiplyKernel<T, ActivationType::RELU><<<gridSize, blockSize>>>(output, input1, input2, n);
			return;
		case ActivationType::SILU:
			fusedActivationMultiplyKernel<T, ActivationType::SILU><<<gridSize, blockSize>>>(output, input1, input2, n);
			return;
		case ActivationType::GELU:
			fusedActivationMultiplyKernel<T, ActivationType::GELU><<<gridSize, blockSize>>>(output, input1, input2, n);
			return;
		default:
			assert(false);
	}
}

#define INSTANTIALIZE(T) \
	template void fusedActivationMultiply<T>( \
		T* output, \
		const T* input1, \
		const T* input2, \
		int64_t n, \
		ActivationType activationType \
	)

INSTANTIALIZE(half);
INSTANTIALIZE(float);

}  // namespace st::kernel
