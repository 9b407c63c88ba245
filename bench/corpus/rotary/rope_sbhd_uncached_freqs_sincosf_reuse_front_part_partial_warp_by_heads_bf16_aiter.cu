// Rotary embedding as AMD's AITER (AI Tensor Engine for ROCm, csrc/kernels/rope_kernels.cu, rope_fwd_impl ->
// dispatch_1c_sbhd_uncached<Op1cUncachedFwd, RotateStyle, ReuseFreqsFrontPart>, the fused RoPE behind Megatron /
// TE-style training on ROCm; written in CUDA syntax, hipified) writes the "1c, uncached, sbhd" forward:
//   input, output [s, b, h, d] (SBHD, Megatron's layout), with all strides passed as int32 arguments (out of place)
//   freqs fp32 [s, 1, 1, size_f]: the ANGLES themselves (pos * inv_freq), no position ids, no cos/sin cache: every
//   thread calls sincosf(freqs[did]) itself ("uncached"); ReuseFreqsFrontPart = true: freqs holds only the first
//   half (size_r = 2 * size_f rotated channels), the second half of the pair reuses the same angle
//   NeoX pairing (did, did + size_r / 2); channels past size_r are copied through (partial rotary)
// Launch: grid (s, b), one block per (position, batch entry), block (C10_WARP_SIZE, size_h < 16 ? 4 : 8): x walks
// the rotary pairs, y walks the heads, both with stride loops under `#pragma unroll`; the per-pair sin/cos is
// computed once per x-thread and reused over its heads; float math, one rounding by scalar_t(...).
// AITER's kernel entry is a template over the Op struct (whose static template apply<> does the work), the rotate
// style and the reuse flag, behind a DISPATCH macro on (input dtype, freqs dtype, style, reuse); here that macro is
// cut to bf16 input / fp32 freqs, and only NeoX is dispatched (the GPT-J branch of get_cos_sin_uncached was an empty
// stub in the version read). Spec: rotary_percent 0.5 (size_f = d / 4); freqs uniform(0, 4096) (pos * inv_freq).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <stdexcept>
#include <string>

#define ROTATE_STYLE_NEOX 0
#define ROTATE_STYLE_GPTJ 1
#define C10_WARP_SIZE 32

template <int32_t RotateStyle, bool IsForward, bool ReuseFreqsFrontPart, typename scalar_f_t>
inline __device__ void get_cos_sin_uncached(float* p_cos_0, float* p_sin_0, float* p_cos_1, float* p_sin_1,
                                            const scalar_f_t* __restrict__ p_freqs, const int32_t did,
                                            const int32_t size_half_r)
{
    if constexpr (RotateStyle == ROTATE_STYLE_NEOX)
    {
        if constexpr (IsForward == true)
        {
            sincosf(float(p_freqs[did]), p_sin_0, p_cos_0);
            if constexpr (ReuseFreqsFrontPart)
            {
                *p_cos_1 = *p_cos_0;
                *p_sin_1 = *p_sin_0;
            }
            else
            {
                sincosf(float(p_freqs[did + size_half_r]), p_sin_1, p_cos_1);
            }
        }
    }
}

template <int32_t RotateStyle>
inline __device__ void get_offset_d(int32_t* p_offset_0, int32_t* p_offset_1, const int32_t did,
                                    const int32_t stride_d, const int32_t offset_half_r)
{
    if constexpr (RotateStyle == ROTATE_STYLE_NEOX)
    {
        *p_offset_0 = did * stride_d;
        *p_offset_1 = *p_offset_0 + offset_half_r;
    }
    else if constexpr (RotateStyle == ROTATE_STYLE_GPTJ)
    {
        *p_offset_0 = 2 * did;
        *p_offset_1 = *p_offset_0 + 1;
    }
}

struct Op1cUncachedFwd
{
    template <int32_t RotateStyle, bool ReuseFreqsFrontPart, typename scalar_t, typename scalar_f_t>
    __device__ static void apply(scalar_t* __restrict__ p_output, const scalar_t* __restrict__ p_input,
                                 const scalar_f_t* __restrict__ p_freqs,
                                 const int32_t size_h, const int32_t size_d, const int32_t size_f,
                                 const int32_t stride_i_h, const int32_t stride_i_d,
                                 const int32_t stride_o_h, const int32_t stride_o_d)
    {
        // rotate count
        const int32_t size_r          = ReuseFreqsFrontPart ? (size_f << 1) : size_f;
        const int32_t size_half_r     = size_r >> 1;
        const int32_t offset_half_r_i = size_half_r * stride_i_d;
        const int32_t offset_half_r_o = size_half_r * stride_o_d;

        #pragma unroll
        for (int32_t did = threadIdx.x; did < size_half_r; did += blockDim.x)
        {
            int32_t offset_i_d_0, offset_i_d_1, offset_o_d_0, offset_o_d_1;
            get_offset_d<RotateStyle>(&offset_i_d_0, &offset_i_d_1, did, stride_i_d, offset_half_r_i);
            get_offset_d<RotateStyle>(&offset_o_d_0, &offset_o_d_1, did, stride_o_d, offset_half_r_o);

            float cos_0, sin_0, cos_1, sin_1;
            get_cos_sin_uncached<RotateStyle, true, ReuseFreqsFrontPart>(
                &cos_0, &sin_0, &cos_1, &sin_1, p_freqs, did, size_half_r);

            #pragma unroll
            for (int32_t hid = threadIdx.y; hid < size_h; hid += blockDim.y)
            {
                const int32_t offset_i_h = hid * stride_i_h;
                const int32_t offset_o_h = hid * stride_o_h;

                const float input_0 = float(p_input[offset_i_h + offset_i_d_0]);
                const float input_1 = float(p_input[offset_i_h + offset_i_d_1]);

                p_output[offset_o_h + offset_o_d_0] = scalar_t(input_0 * cos_0 - input_1 * sin_0);
                p_output[offset_o_h + offset_o_d_1] = scalar_t(input_1 * cos_1 + input_0 * sin_1);
            }
        }

        // the rest are just forwarded
        if (size_d > size_r)
        {
            #pragma unroll
            for (int32_t hid = threadIdx.y; hid < size_h; hid += blockDim.y)
            {
                const int32_t offset_i = hid * stride_i_h;
                const int32_t offset_o = hid * stride_o_h;

                #pragma unroll
                for (int32_t did = threadIdx.x + size_r; did < size_d; did += blockDim.x)
                {
                    p_output[offset_o + did * stride_o_d] = p_input[offset_i + did * stride_i_d];
                }
            }
        }
    }
};

/* kerntune:
args  = ["p_output: out bf16[s * b * h * d]", "p_input: in bf16[s * b * h * d]",
         "p_freqs: in f32[s * f] ~ uniform(0, 4096)",
         "size_h: i32 = h", "size_d: i32 = d", "size_f: i32 = f",
         "stride_i_s: i32 = b * h * d", "stride_i_b: i32 = h * d", "stride_i_h: i32 = d", "stride_i_d: i32 = 1",
         "stride_o_s: i32 = b * h * d", "stride_o_b: i32 = h * d", "stride_o_h: i32 = d", "stride_o_d: i32 = 1"]
sizes = [{ s = 4096, b = 4, h = 32, d = 128, f = 32 }, { s = 1, b = 16, h = 32, d = 128, f = 32 },
         { s = 333, b = 3, h = 7, d = 96, f = 24 }]
grid  = ["s", "b"]
block = [32, "4 if h < 16 else 8"]
template_args = ["Op1cUncachedFwd", "0", "true", "__nv_bfloat16", "float"]
*/
template <typename Op, int32_t RotateStyle, bool ReuseFreqsFrontPart, typename scalar_t, typename scalar_f_t>
__global__ void kn_entry_1c_sbhd_uncached(
    scalar_t* __restrict__         p_output,
    const scalar_t* __restrict__   p_input,
    const scalar_f_t* __restrict__ p_freqs,
    const int32_t size_h, const int32_t size_d,
    const int32_t size_f,   // size of last dimension of freqs.
    const int32_t stride_i_s, const int32_t stride_i_b, const int32_t stride_i_h, const int32_t stride_i_d,
    const int32_t stride_o_s, const int32_t stride_o_b, const int32_t stride_o_h, const int32_t stride_o_d)
{
    const int32_t sid = blockIdx.x;
    const int32_t bid = blockIdx.y;
    const int32_t offset_i = sid * stride_i_s + bid * stride_i_b;
    const int32_t offset_o = sid * stride_o_s + bid * stride_o_b;
    const int32_t offset_f = sid * size_f;

    Op::template apply<RotateStyle, ReuseFreqsFrontPart>(
        p_output + offset_o,
        p_input + offset_i,
        p_freqs + offset_f,
        size_h, size_d, size_f,
        stride_i_h, stride_i_d,
        stride_o_h, stride_o_d);
}

template <typename Op, int32_t RotateStyle, bool ReuseFreqsFrontPart, typename scalar_t, typename scalar_f_t>
void dispatch_1c_sbhd_uncached(
    scalar_t* __restrict__ p_output, const scalar_t* __restrict__ p_input, const scalar_f_t* __restrict__ p_freqs,
    const int32_t size_s, const int32_t size_b, const int32_t size_h, const int32_t size_d, const int32_t size_f,
    const int32_t stride_i_s, const int32_t stride_i_b, const int32_t stride_i_h, const int32_t stride_i_d,
    const int32_t stride_o_s, const int32_t stride_o_b, const int32_t stride_o_h, const int32_t stride_o_d,
    cudaStream_t stream)
{
    const dim3 grid(size_s, size_b);
    const dim3 block(C10_WARP_SIZE, size_h < 16 ? 4 : 8);

    kn_entry_1c_sbhd_uncached<Op, RotateStyle, ReuseFreqsFrontPart><<<grid, block, 0, stream>>>(
        p_output,
        p_input,
        p_freqs,
        size_h, size_d, size_f,
        stride_i_s, stride_i_b, stride_i_h, stride_i_d,
        stride_o_s, stride_o_b, stride_o_h, stride_o_d);
}

// output, input: [s, b, h, d] bf16, contiguous here (AITER reads the strides off the tensors); freqs: [s, 1, 1, f]
// fp32 angles. rotate_style: ROTATE_STYLE_NEOX only; reuse_freqs_front_part: f = rotated channels / 2 if true.
void rope_fwd_impl(__nv_bfloat16* output, const __nv_bfloat16* input, const float* freqs, int32_t size_s,
                   int32_t size_b, int32_t size_h, int32_t size_d, int32_t size_f, int32_t rotate_style,
                   bool reuse_freqs_front_part, cudaStream_t stream)
{
    const int32_t stride_i_d = 1, stride_i_h = size_d, stride_i_b = size_h * size_d, stride_i_s = size_b * size_h * size_d;
    const int32_t stride_o_d = 1, stride_o_h = size_d, stride_o_b = size_h * size_d, stride_o_s = size_b * size_h * size_d;

    if (rotate_style != ROTATE_STYLE_NEOX)
        throw std::runtime_error("rope_fwd_impl does't support rotate type " + std::to_string(rotate_style) + ".");
    constexpr int32_t RotateStyle = ROTATE_STYLE_NEOX;
    if (reuse_freqs_front_part)
    {
        constexpr bool ReuseFreqsFrontPart = true;
        dispatch_1c_sbhd_uncached<Op1cUncachedFwd, RotateStyle, ReuseFreqsFrontPart>(
            output, input, freqs, size_s, size_b, size_h, size_d, size_f,
            stride_i_s, stride_i_b, stride_i_h, stride_i_d, stride_o_s, stride_o_b, stride_o_h, stride_o_d, stream);
    }
    else
    {
        constexpr bool ReuseFreqsFrontPart = false;
        dispatch_1c_sbhd_uncached<Op1cUncachedFwd, RotateStyle, ReuseFreqsFrontPart>(
            output, input, freqs, size_s, size_b, size_h, size_d, size_f,
            stride_i_s, stride_i_b, stride_i_h, stride_i_d, stride_o_s, stride_o_b, stride_o_h, stride_o_d, stream);
    }
}
