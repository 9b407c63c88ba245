// 2-D (image) rotary embedding as AMD's AITER writes it (csrc/kernels/rope_kernels.cu, rope_2d_fwd_impl ->
// dispatch_1c_2d_cached<Op1cCachedFwd, RotateStyle, ReuseFreqsFrontPart> -> kn_entry_1c_2d_cached; the axial 2-D
// RoPE of vision transformers / image-generation DiTs, where each patch token has a (row, column) position):
//   input, output [b, s, h, d] (BSHD) with s = img_height * img_width patches in row-major order, strides passed
//   as int arguments, out of place
//   the head dim split in two: channels [0, d/2) rotated by the patch ROW with cos_h / sin_h [img_height, d/2],
//   channels [d/2, d) by the patch COLUMN with cos_w / sin_w [img_width, d/2] (fp32 "cached" tables, no position
//   ids: the position is the block's coordinate)
//   ReuseFreqsFrontPart = false (the tables hold both halves of each pair; a reused front part would run the
//   pairs of the first half into the second), NeoX pairing inside each half: (did, did + d/4)
// Launch: grid (img_height, img_width, b): one block per patch per image, block (C10_WARP_SIZE, size_h < 16 ? 4 : 8)
// with x over the pairs and y over the heads; the kernel calls the same Op1cCachedFwd::apply twice, once on the
// row half and once on the column half (offset by d/2 in the input, output and rows of the tables); float math,
// one rounding by scalar_t(...). Cut-down DISPATCH: fp16 input, fp32 tables, NeoX only.
// cos / sin uniform(-1, 1).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <stdexcept>
#include <string>

#define ROTATE_STYLE_NEOX 0
#define ROTATE_STYLE_GPTJ 1
#define C10_WARP_SIZE 32

template <int32_t RotateStyle, bool IsForward, bool ReuseFreqsFrontPart, typename scalar_f_t>
inline __device__ void get_cos_sin_cached(float* p_cos_0, float* p_sin_0, float* p_cos_1, float* p_sin_1,
                                          const scalar_f_t* __restrict__ p_cos, const scalar_f_t* __restrict__ p_sin,
                                          const int32_t did, const int32_t size_half_r)
{
    if constexpr (RotateStyle == ROTATE_STYLE_NEOX)
    {
        if constexpr (IsForward == true)
        {
            *p_cos_0 = float(p_cos[did]);
            *p_sin_0 = float(p_sin[did]);
            if constexpr (ReuseFreqsFrontPart)
            {
                *p_cos_1 = *p_cos_0;
                *p_sin_1 = *p_sin_0;
            }
            else
            {
                *p_cos_1 = float(p_cos[did + size_half_r]);
                *p_sin_1 = float(p_sin[did + size_half_r]);
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

struct Op1cCachedFwd
{
    template <int32_t RotateStyle, bool ReuseFreqsFrontPart, typename scalar_t, typename scalar_f_t>
    __device__ static void apply(scalar_t* __restrict__ p_output, const scalar_t* __restrict__ p_input,
                                 const scalar_f_t* __restrict__ p_cos, const scalar_f_t* __restrict__ p_sin,
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
            get_cos_sin_cached<RotateStyle, true, ReuseFreqsFrontPart>(
                &cos_0, &sin_0, &cos_1, &sin_1, p_cos, p_sin, did, size_half_r);

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
args  = ["p_output: out f16[b * H * W * h * d]", "p_input: in f16[b * H * W * h * d]",
         "p_cos_h: in f32[H * d / 2] ~ uniform(-1, 1)", "p_sin_h: in f32[H * d / 2] ~ uniform(-1, 1)",
         "p_cos_w: in f32[W * d / 2] ~ uniform(-1, 1)", "p_sin_w: in f32[W * d / 2] ~ uniform(-1, 1)",
         "img_width: i32 = W", "size_h: i32 = h", "size_d: i32 = d",
         "stride_i_b: i32 = H * W * h * d", "stride_i_s: i32 = h * d", "stride_i_h: i32 = d", "stride_i_d: i32 = 1",
         "stride_o_b: i32 = H * W * h * d", "stride_o_s: i32 = h * d", "stride_o_h: i32 = d", "stride_o_d: i32 = 1"]
sizes = [{ b = 8, H = 64, W = 64, h = 16, d = 128 }, { b = 1, H = 8, W = 8, h = 12, d = 64 },
         { b = 3, H = 37, W = 23, h = 7, d = 96 }]
grid  = ["H", "W", "b"]
block = [32, "4 if h < 16 else 8"]
template_args = ["Op1cCachedFwd", "0", "false", "__half", "float"]
*/
template <typename Op, int32_t RotateStyle, bool ReuseFreqsFrontPart, typename scalar_t, typename scalar_f_t>
__global__ void kn_entry_1c_2d_cached(
    scalar_t* __restrict__         p_output,
    const scalar_t* __restrict__   p_input,
    const scalar_f_t* __restrict__ p_cos_h,
    const scalar_f_t* __restrict__ p_sin_h,
    const scalar_f_t* __restrict__ p_cos_w,
    const scalar_f_t* __restrict__ p_sin_w,
    const int32_t img_width, const int32_t size_h, const int32_t size_d,
    const int32_t stride_i_b, const int32_t stride_i_s, const int32_t stride_i_h, const int32_t stride_i_d,
    const int32_t stride_o_b, const int32_t stride_o_s, const int32_t stride_o_h, const int32_t stride_o_d)
{
    const int Hid = blockIdx.x;
    const int Wid = blockIdx.y;
    const int sid = Hid * img_width + Wid;
    const int bid = blockIdx.z;
    const int size_half_d = size_d >> 1;

    const int offset_h_i = bid * stride_i_b + sid * stride_i_s;
    const int offset_h_o = bid * stride_o_b + sid * stride_o_s;
    const int offset_h_f = Hid * size_half_d;
    Op::template apply<RotateStyle, ReuseFreqsFrontPart>(
        p_output + offset_h_o,
        p_input + offset_h_i,
        p_cos_h + offset_h_f,
        p_sin_h + offset_h_f,
        size_h, size_half_d, size_half_d,
        stride_i_h, stride_i_d,
        stride_o_h, stride_o_d);

    const int offset_w_i = offset_h_i + size_half_d * stride_i_d;
    const int offset_w_o = offset_h_o + size_half_d * stride_o_d;
    const int offset_w_f = Wid * size_half_d;
    Op::template apply<RotateStyle, ReuseFreqsFrontPart>(
        p_output + offset_w_o,
        p_input + offset_w_i,
        p_cos_w + offset_w_f,
        p_sin_w + offset_w_f,
        size_h, size_half_d, size_half_d,
        stride_i_h, stride_i_d,
        stride_o_h, stride_o_d);
}

template <typename Op, int32_t RotateStyle, bool ReuseFreqsFrontPart, typename scalar_t, typename scalar_f_t>
void dispatch_1c_2d_cached(
    scalar_t* __restrict__ p_output, const scalar_t* __restrict__ p_input,
    const scalar_f_t* __restrict__ p_cos_h, const scalar_f_t* __restrict__ p_sin_h,
    const scalar_f_t* __restrict__ p_cos_w, const scalar_f_t* __restrict__ p_sin_w,
    const int img_height, const int img_width,
    const int32_t size_b, const int32_t size_h, const int32_t size_d,
    const int32_t stride_i_b, const int32_t stride_i_s, const int32_t stride_i_h, const int32_t stride_i_d,
    const int32_t stride_o_b, const int32_t stride_o_s, const int32_t stride_o_h, const int32_t stride_o_d,
    cudaStream_t stream)
{
    const dim3 grid(img_height, img_width, size_b);
    const dim3 block(C10_WARP_SIZE, size_h < 16 ? 4 : 8);

    kn_entry_1c_2d_cached<Op, RotateStyle, ReuseFreqsFrontPart><<<grid, block, 0, stream>>>(
        p_output,
        p_input,
        p_cos_h, p_sin_h,
        p_cos_w, p_sin_w,
        img_width, size_h, size_d,
        stride_i_b, stride_i_s, stride_i_h, stride_i_d,
        stride_o_b, stride_o_s, stride_o_h, stride_o_d);
}

// output, input: [b, img_height * img_width, h, d] fp16, contiguous here; cos_h / sin_h: [img_height, d / 2],
// cos_w / sin_w: [img_width, d / 2] fp32. rotate_style: ROTATE_STYLE_NEOX only.
void rope_2d_fwd_impl(__half* output, const __half* input, const float* cos_h, const float* sin_h,
                      const float* cos_w, const float* sin_w, int32_t img_height, int32_t img_width, int32_t size_b,
                      int32_t size_s, int32_t size_h, int32_t size_d, int32_t rotate_style,
                      bool reuse_freqs_front_part, cudaStream_t stream)
{
    const int stride_i_d = 1, stride_i_h = size_d, stride_i_s = size_h * size_d, stride_i_b = size_s * size_h * size_d;
    const int stride_o_d = 1, stride_o_h = size_d, stride_o_s = size_h * size_d, stride_o_b = size_s * size_h * size_d;

    if (size_s != img_height * img_width)
        throw std::runtime_error("rope_2d_fwd_impl - input tensor shape doesn't match image size.");
    if (rotate_style != ROTATE_STYLE_NEOX)
        throw std::runtime_error("rope_2d_fwd_impl does't support rotate type " + std::to_string(rotate_style) + ".");
    constexpr int32_t RotateStyle = ROTATE_STYLE_NEOX;
    if (reuse_freqs_front_part)
    {
        constexpr bool ReuseFreqsFrontPart = true;
        dispatch_1c_2d_cached<Op1cCachedFwd, RotateStyle, ReuseFreqsFrontPart>(
            output, input, cos_h, sin_h, cos_w, sin_w, img_height, img_width, size_b, size_h, size_d,
            stride_i_b, stride_i_s, stride_i_h, stride_i_d, stride_o_b, stride_o_s, stride_o_h, stride_o_d, stream);
    }
    else
    {
        constexpr bool ReuseFreqsFrontPart = false;
        dispatch_1c_2d_cached<Op1cCachedFwd, RotateStyle, ReuseFreqsFrontPart>(
            output, input, cos_h, sin_h, cos_w, sin_w, img_height, img_width, size_b, size_h, size_d,
            stride_i_b, stride_i_s, stride_i_h, stride_i_d, stride_o_b, stride_o_s, stride_o_h, stride_o_d, stream);
    }
}
