// HQQ's (mobiusml/hqq, hqq/core/quantize.py: Quantizer.quantize, optimize=False, then Quantizer.pack['4bit_u8'] =
// BitPack.pack_4bit_u8 and Quantizer.cuda, which stores the meta tensors in fp16) weight quantization as one CUDA
// kernel, written in the style of HQQ's own CUDA kernels (hqq/kernels/hqq_aten_cuda_kernel.cu: template over
// scalar_t, #define BLOCK_SIZE 256, cdiv, `int i = blockIdx.x*blockDim.x + threadIdx.x; if(i>=n) return;`, h / w
// naming, unsigned char packed weights) -- the quantize-side twin of dequantize_4bit_u8_kernel:
//   nbits = 4, channel_wise, axis = 0 (HQQ's default of this version): W.reshape([group_size, -1]), so group j is
//   COLUMN j of a [group_size, w] view, w = numel / group_size: elements j, j + w, j + 2w, ... (strided groups;
//   adjacent threads read adjacent columns)
//   _min, _max over the group in fp32 (W.float()); scale = (max_v / (_max - _min)).clamp(max=2e4) with max_v = 15
//   (an INVERSE scale, so that quantizing is W * scale + zero); zero = -_min * scale (round_zero = False);
//   W_q = round(W * scale + zero).clamp(0, 15) (torch.round: half to even -> rintf)
//   pack_4bit_u8 on the [group_size, w] W_q: packed [group_size / 2, w] uint8, row i = (W_q[i] << 4) | W_q[i + h]
//   with h = group_size / 2 (first half of the rows in the high nibble)
//   meta: scale = 1 / scale and zero, [1, w] each, converted to fp16 by Quantizer.cuda (one rounding each)
//   argument order as the dequantize kernels: packed weights, scale, zero, then the source W, h, w
//   launch: one thread per group (column), cdiv(w, BLOCK_SIZE) blocks of 256; int indices as HQQ's kernels
//   (group_size * w = numel < 2^31)
// No bug found. (_max == _min gives max_v / 0 = inf, clamped to 2e4 exactly as torch.clamp does.)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

inline unsigned int cdiv(unsigned int a, unsigned int b) { return (a + b - 1) / b; }
#define BLOCK_SIZE 256  //~256

/* kerntune:
args  = ["Wq_packed: out u8[R * C / 2]", "scale: out f16[R * C / G]", "zero: out f16[R * C / G]",
         "W: in f16[R * C]", "h: i32 = G / 2", "w: i32 = R * C / G"]
sizes = [{ R = 4096, C = 14336, G = 64 }, { R = 8, C = 4096, G = 64 }, { R = 999, C = 1408, G = 128 }]
grid  = "cdiv(R * C / G, 256)"
block = 256
template_args = ["half"]
*/
template <typename scalar_t>
__global__ void quantize_4bit_u8_kernel(unsigned char* __restrict__ Wq_packed, scalar_t* __restrict__ scale,
                                        scalar_t* __restrict__ zero, const scalar_t* __restrict__ W, int h, int w) {
	int j = blockIdx.x*blockDim.x + threadIdx.x;  // group = column of W.reshape([group_size, -1])
	if(j>=w) return;

	const int group_size = 2*h;

	//Get min/max values
	float _min = float(W[j]);
	float _max = _min;
	for(int i=1; i<group_size; i++){
		const float _w = float(W[i*w + j]);
		_min = fminf(_min, _w);
		_max = fmaxf(_max, _w);
	}

	const float max_v  = 15.f;  //2**nbits - 1
	const float min_v  = 0.f;
	const float _scale = fminf(max_v/(_max - _min), 2e4f);  //clamp to avoid half-precision problems
	const float _zero  = -_min*_scale;

	//Quantize + pack: first chunk in the high nibble, second chunk in the low nibble
	for(int i=0; i<h; i++){
		const float _w1 = float(W[i*w + j]);
		const float _w2 = float(W[(i + h)*w + j]);
		const float _q1 = fminf(fmaxf(rintf(_w1*_scale + _zero), min_v), max_v);
		const float _q2 = fminf(fmaxf(rintf(_w2*_scale + _zero), min_v), max_v);
		Wq_packed[i*w + j] = (unsigned char)(((int)_q1 << 4) | (int)_q2);
	}

	//Store meta-data (the scale inverted for dequantization)
	scale[j] = scalar_t(1.f/_scale);
	zero[j]  = scalar_t(_zero);
}

// W: device weight of numel elements (fp16, contiguous); Wq_packed: device [group_size / 2, numel / group_size]
// uint8; scale, zero: device [1, numel / group_size] fp16. group_size even and dividing numel.
void quantize_4bit_u8_axis0(const half* W, unsigned char* Wq_packed, half* scale, half* zero, int64_t numel,
                            int group_size, cudaStream_t stream)
{
	int h      = group_size/2;  //rows of the packed tensor
	int w      = (int)(numel/group_size);
	int blocks = cdiv(w, BLOCK_SIZE);

	quantize_4bit_u8_kernel<half><<<blocks, BLOCK_SIZE, 0, stream>>>(Wq_packed, scale, zero, W, h, w);
}
