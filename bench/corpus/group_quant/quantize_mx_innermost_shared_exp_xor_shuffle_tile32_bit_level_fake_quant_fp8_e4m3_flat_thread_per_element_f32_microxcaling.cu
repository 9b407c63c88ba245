// MX (microscaling) block quantization as Microsoft's microxcaling library emulates it on the GPU
// (microsoft/microxcaling, mx/cpp/mx.cuh quantize_mx_innermost_cuda_kernel behind quantize_mx_by_tile_cuda in
// mx/cpp/mx.cu, helpers of common.cuh / shared_exp.cuh / quantize.cuh), fp32 in and out:
//   in, out [rows, hidden] fp32, FAKE quantization (quantize then dequantize in place of the values, as the
//   library's mx_ops does for MX-emulated training); tiles of tile_size = 32 consecutive elements along the
//   innermost axis share one power-of-two scale: the tile's largest BIASED fp32 exponent (bit field, not a max of
//   |x|), minus the element format's emax, clamped to the 8-bit scale range (NaN kept), scale = 2^(e - 127) built
//   from bits; each element x / scale is rounded bit by bit to the element format (here MXFP8 e4m3: elem_ebits 4,
//   elem_mbits 5 counting sign and implied one, max_norm 448, saturating, subnormals kept, round half away
//   from zero = the library's rd_away default) and multiplied back by the scale
//   ONE THREAD PER ELEMENT on a flat grid: offset = blockDim.x * blockIdx.x + threadIdx.x (long), the shared
//   exponent reduced across the tile's lanes with __shfl_xor_sync butterflies of width tile_size;
//   get_blocks / get_threads: threads = min(total, MAX_THREADS = 1024), blocks = ceil(total / 1024)
//   argument order in, scale_bits, elem_ebits, elem_mbits, elem_max_norm, total_size, tile_size,
//   flush_fp32_subnorms, rounding_mode, out
// Fixed: the original returns for offset >= total_size BEFORE the full-mask shuffles, so a partial last warp
// (total_size not a multiple of 32, possible for tile_size < 32) calls __shfl_xor_sync(0xFFFFFFFF) with exited
// lanes; out-of-range lanes now stay in the shuffle with exponent 0 and return after it, and the launcher rounds
// the thread count up to whole warps. The tie-detection mask of round-half-even is built with a guarded shift
// (the original shifts by up to 47 bits for deep subnormals). The helpers are re-written, not copied; the
// torch::Tensor wrapper is a plain launcher.
#include <cuda_runtime.h>

#include <algorithm>

#define MAX_THREADS 1024
#define WARP_SIZE 32

#define FLOAT32_EXP_BIAS 127
#define FLOAT32_EXP_MAX 255
#define FLOAT32_TRAILING_MBITS 23
#define FLOAT32_IMPLIED1 (1 << FLOAT32_TRAILING_MBITS)
#define FLOAT32_FULL_MBITS (FLOAT32_TRAILING_MBITS + 1)
#define FLOAT32_EXP_OFFSET 23
#define FLOAT32_SIGN_OFFSET 31
#define FLOAT32_EXP_MASK 0x7f800000
#define FLOAT32_MANTISSA_MASK 0x007fffff

typedef union {
    unsigned int i;
    float f;
} u_float_int;

typedef enum _RoundingMode {
    rd_away = 0,    // nearest, ties away from zero
    rd_floor = 1,   // truncate
    rd_even = 2     // nearest, ties to even
} RoundingMode;

//-----------------------------------------------------------------------
// fp32 bit fields
//-----------------------------------------------------------------------
__host__ __device__ __forceinline__
int get_biased_exponent(const float input) {
    u_float_int u;
    u.f = input;
    return (int) ((u.i & FLOAT32_EXP_MASK) >> FLOAT32_EXP_OFFSET);
}

__host__ __device__ __forceinline__
int get_unbiased_exponent(const float input) {
    const int e = get_biased_exponent(input);
    return (e == 0) ? 1 - FLOAT32_EXP_BIAS : e - FLOAT32_EXP_BIAS;  // denorms count as emin
}

__host__ __device__ __forceinline__
float construct_float(int sign, int biased_exp, int trailing_mantissa) {
    u_float_int u;
    u.i = (unsigned int) trailing_mantissa | ((unsigned int) biased_exp << FLOAT32_EXP_OFFSET) |
          ((unsigned int) sign << FLOAT32_SIGN_OFFSET);
    return u.f;
}

//-----------------------------------------------------------------------
// Shared scale of a tile from its largest biased exponent
//-----------------------------------------------------------------------
__host__ __device__ __forceinline__
float mx_get_shared_scale(int shared_exp, const int scale_bits, const float elem_max_norm) {
    // offset by the element emax, NaN (255) passes through
    if (shared_exp != FLOAT32_EXP_MAX) {
        shared_exp -= get_unbiased_exponent(elem_max_norm);
    }
    // clamp to what scale_bits can hold: overflow -> NaN, underflow -> -emax
    const int emax = (scale_bits != 0) ? (1 << (scale_bits - 1)) - 1 : FLOAT32_EXP_MAX;
    const int unbiased = shared_exp - FLOAT32_EXP_BIAS;
    if (unbiased > emax) shared_exp = FLOAT32_EXP_MAX;
    if (unbiased < -emax) shared_exp = FLOAT32_EXP_BIAS - emax;
    // subnormal (0) or NaN (255) scales get the top mantissa bit set
    const int mant = (shared_exp == 0 || shared_exp == FLOAT32_EXP_MAX) ? (FLOAT32_IMPLIED1 >> 1) : 0;
    return construct_float(0, shared_exp, mant);
}

//-----------------------------------------------------------------------
// Round an fp32 value to 'bits' (sign + implied one + mantissa) and 'exp_bits' (0: integer) bit by bit
//-----------------------------------------------------------------------
__host__ __device__ __forceinline__
float quantize_elemwise(const float input, const int bits, const int exp_bits, const float max_norm,
                        const RoundingMode rounding_mode, const bool saturate_normals, const bool allow_denorm) {
    u_float_int u;
    u.f = input;
    int biased_exp = (int) ((u.i & FLOAT32_EXP_MASK) >> FLOAT32_EXP_OFFSET);
    const int sign = (int) (u.i >> FLOAT32_SIGN_OFFSET);
    int mant = (int) (u.i & FLOAT32_MANTISSA_MASK);

    const int mbits = bits - 1;  // without the sign
    const bool is_int = (exp_bits == 0);
    const int new_bias = is_int ? 1 : (1 << (exp_bits - 1)) - 1;
    const int new_biased_exp = biased_exp - FLOAT32_EXP_BIAS + new_bias;
    if (!is_int && !allow_denorm && new_biased_exp < 1) {
        return 0.0f;
    }
    // extra right shifts for values that become subnormal in the target format
    int exp_diff = (new_biased_exp <= 0) ? 1 - new_biased_exp : 0;
    exp_diff = (exp_diff > FLOAT32_FULL_MBITS) ? FLOAT32_FULL_MBITS : exp_diff;

    // shift right and round (overflow into one more bit allowed except for integers)
    const bool is_subnorm = (biased_exp == 0);
    const int sig_bits = is_subnorm ? FLOAT32_TRAILING_MBITS : FLOAT32_FULL_MBITS;
    if (!is_subnorm) mant += FLOAT32_IMPLIED1;
    bool tie = false, even = false;
    if (rounding_mode == rd_even) {
        const int tbits = exp_diff + (sig_bits - mbits);  // bits dropped
        const long long below = (tbits - 1 >= 31) ? 0x7fffffffLL : ((1LL << (tbits - 1)) - 1);
        tie = !(mant & below);
        even = (tbits >= 31) ? true : !(mant & (1LL << tbits));
    }
    mant = mant >> exp_diff;
    mant = mant >> (sig_bits - mbits - 1);
    if ((rounding_mode == rd_away || rounding_mode == rd_even) &&
        (!is_int || mant != ((1 << (mbits + 1)) - 1))) {
        if (!(tie && even)) mant += 1;
    }
    mant = mant >> 1;
    if (mant == 0) {
        return 0.0f;
    }
    // shift back up to a trailing fp32 mantissa; a carry out bumps the exponent
    mant = mant << (sig_bits - mbits + exp_diff);
    const bool carry = (mant >= (1 << sig_bits));
    if (carry && !is_subnorm) mant >>= 1;
    mant &= (FLOAT32_IMPLIED1 - 1);
    if (carry) biased_exp += 1;

    float output = construct_float(sign, biased_exp, mant);
    if (fabsf(output) > max_norm) {
        output = (is_int || saturate_normals) ? (sign ? -max_norm : max_norm)
                                              : construct_float(sign, FLOAT32_EXP_MAX, 0);
    }
    return output;
}

//-----------------------------------------------------------------------
// quantize_mx_innermost: MX along the innermost axis, one thread per element
//  - tile_size divides the innermost size, is a power of 2 and <= WARP_SIZE
//-----------------------------------------------------------------------
/* kerntune:
args  = ["in: in f32[rows * hidden]", "scale_bits: i32 = 8", "elem_ebits: i32 = 4", "elem_mbits: i32 = 5",
         "elem_max_norm: f32 = 448.0", "total_size: i64 = rows * hidden", "tile_size: i32 = 32",
         "flush_fp32_subnorms: u8 = 0", "rounding_mode: i32 = 0", "out: out f32[rows * hidden]"]
sizes = [{ rows = 8192, hidden = 4096 }, { rows = 4, hidden = 4096 }, { rows = 1001, hidden = 2976 }]
grid  = "cdiv(rows * hidden, 1024)"
block = "min(cdiv(rows * hidden, 32) * 32, 1024)"
template_args = ["float"]
*/
template<typename T>
__global__ void quantize_mx_innermost_cuda_kernel(
    const T* __restrict__ in,
    const int scale_bits,
    const int elem_ebits,
    const int elem_mbits,
    const float elem_max_norm,
    const long total_size,
    const int tile_size,
    const bool flush_fp32_subnorms,
    const RoundingMode rounding_mode,
    T* __restrict__ out
) {
    const long offset = (long) blockDim.x * blockIdx.x + threadIdx.x;
    const bool in_range = offset < total_size;
    const T elem = in_range ? in[offset] : (T) 0;

    // allreduce the biased exponent over the lanes of the tile
    int shared_exp = get_biased_exponent(elem);
    for (int mask = tile_size / 2; mask > 0; mask /= 2) {
        int _tmp = __shfl_xor_sync(0xFFFFFFFF, shared_exp, mask);
        shared_exp = (_tmp > shared_exp) ? _tmp : shared_exp;
    }
    if (!in_range) return;

    const bool flush_tile = (shared_exp == 0 && flush_fp32_subnorms);
    const float scale = mx_get_shared_scale(shared_exp, scale_bits, elem_max_norm);

    T scaled_in = flush_tile ? 0 : elem / scale;
    T scaled_out = quantize_elemwise(scaled_in, elem_mbits, elem_ebits, elem_max_norm,
                                     rounding_mode, true, true);
    out[offset] = scaled_out * scale;
}

//-----------------------------------------------------------------------
// Launch helpers: 1 block of 'size' threads, or ceil(size / max_threads) blocks of max_threads
//-----------------------------------------------------------------------
inline long get_blocks(long size, int max_threads = MAX_THREADS) {
    if (size <= max_threads) return 1;
    return size / max_threads + ((size % max_threads) ? 1 : 0);
}

inline int get_threads(long size, int max_threads = MAX_THREADS) {
    // whole warps, so that every lane of the last warp exists for the shuffles
    const long warps = (size + WARP_SIZE - 1) / WARP_SIZE;
    return (int) std::min(warps * WARP_SIZE, (long) max_threads);
}

// input, output: device [rows, hidden] fp32 (hidden % tile_size == 0, tile_size a power of 2 <= 32).
void quantize_mx_innermost_cuda(const float* input, float* output, long rows, long hidden,
                                const int scale_bits, const int elem_ebits, const int elem_mbits,
                                const float elem_max_norm, const int tile_size,
                                const bool flush_fp32_subnorms, const RoundingMode rounding_mode,
                                cudaStream_t stream) {
    const long total_size = rows * hidden;
    const long blocks = get_blocks(total_size);
    const int threads = get_threads(total_size);
    quantize_mx_innermost_cuda_kernel<<<blocks, threads, 0, stream>>>(
        input, scale_bits, elem_ebits, elem_mbits, elem_max_norm, total_size, tile_size,
        flush_fp32_subnorms, rounding_mode, output);
}
