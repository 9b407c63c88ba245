// SiLU-and-multiply in the style of ExLlama v1 (turboderp/exllama, exllama_ext/cuda_func/q4_mlp.cu:
// silu_mul_cuda_kernel, launched by q4_mlp_cuda between the gate / up and the down 4-bit matmuls of a Llama MLP),
// half:
//   x (the gate projection, temp_mlp[0]) and y (the up projection, temp_mlp[1]) are two separate [height, width]
//   row-major half matrices; x = silu(x) * y IN PLACE on the gate buffer; argument order x, y, height, width
//   rows and columns read through small MatrixView_half / MatrixView_half_rw wrappers (item_half2 / set_half2 at
//   row * width + column), each thread owning TWO adjacent columns as one half2
//   every step in half2 arithmetic: silu(x) = x * h2rcp(1 + h2exp(-x)) (__hneg2, h2exp, __hadd2, h2rcp, __hmul2),
//   then __hmul2 by y: a half rounding after each operation, no float anywhere
//   block dim3(THREADS_X = 32, THREADS_Y = 4): 32 column pairs by 4 rows; grid (column pairs / 32, rows / 4);
//   launched on the default stream, as ExLlama does
// Fixed: the kernel had no column bound and the grid was (width + 31) / 32 / 2 blocks, which truncates: a width
// that is not a multiple of 64 either lost its last columns (width 2750: 42 blocks cover 2688) or, rounded the
// other way, ran past the row. The grid is now ceil(width / 64) and columns at or past width return. Widths stay
// even (the half2 pairs need it, as in ExLlama, whose intermediate sizes are all even); the tail set is an odd
// row count with a width that is not a multiple of 4 or 64.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

const int THREADS_X = 32;
const int THREADS_Y = 4;

class MatrixView_half
{
public:
    const half* data;
    const int height;
    const int width;

    __device__ __forceinline__ MatrixView_half(const half* data, const int height, const int width)
        : data(data), height(height), width(width)
    { }

    __device__ __forceinline__ half item(int row, int column) const { return data[row * width + column]; }
    __device__ __forceinline__ half2 item_half2(int row, int column) const { return ((half2*)data)[(row * width + column) / 2]; }
};

class MatrixView_half_rw
{
public:
    half* data;
    const int height;
    const int width;

    __device__ __forceinline__ MatrixView_half_rw(half* data, const int height, const int width)
        : data(data), height(height), width(width)
    { }

    __device__ __forceinline__ half item(int row, int column) const { return data[row * width + column]; }
    __device__ __forceinline__ half2 item_half2(int row, int column) const { return ((half2*)data)[(row * width + column) / 2]; }
    __device__ __forceinline__ void set_half2(int row, int column, half2 value) { ((half2*)data)[(row * width + column) / 2] = value; }
};

__device__ __forceinline__ half2 silu(half2 x)
{
    half2 one = __float2half2_rn(1.0f);
    half2 neg_x = __hneg2(x);
    half2 e = h2exp(neg_x);
    half2 sum = __hadd2(one, e);
    half2 r = h2rcp(sum);
    half2 result = __hmul2(x, r);
    return result;
}

/* kerntune:
args  = ["x: inout f16[height * width]", "y: in f16[height * width]", "height: i32 = height", "width: i32 = width"]
sizes = [{ height = 4096, width = 11008 }, { height = 4, width = 13824 }, { height = 999, width = 2750 }]
grid  = ["cdiv(width, 64)", "cdiv(height, 4)"]
block = [32, 4]
*/
__global__ void silu_mul_cuda_kernel
(
    half* x,
    const half* y,
    const int height,
    const int width
)
{
    MatrixView_half_rw x_(x, height, width);
    MatrixView_half y_(y, height, width);

    int column = (THREADS_X * blockIdx.x + threadIdx.x) * 2;
    int row = THREADS_Y * blockIdx.y + threadIdx.y;
    if (row >= height) return;
    if (column >= width) return;

    // silu(x) * y

    half2 x_item = x_.item_half2(row, column);
    half2 y_item = y_.item_half2(row, column);

    x_item = silu(x_item);
    x_item = __hmul2(x_item, y_item);

    x_.set_half2(row, column, x_item);
}

// temp_mlp[0] = silu(temp_mlp[0]) * temp_mlp[1]
//
// x: device [height, width] gate projection (overwritten), y: device [height, width] up projection; width even

void silu_mul_cuda
(
    half* x,
    const half* y,
    const int height,
    const int width
)
{
    dim3 threads(THREADS_X, THREADS_Y, 1);

    dim3 blocks
    (
        (width + THREADS_X * 2 - 1) / (THREADS_X * 2),
        (height + THREADS_Y - 1) / THREADS_Y,
        1
    );

    silu_mul_cuda_kernel<<<blocks, threads>>>(x, y, height, width);
}
