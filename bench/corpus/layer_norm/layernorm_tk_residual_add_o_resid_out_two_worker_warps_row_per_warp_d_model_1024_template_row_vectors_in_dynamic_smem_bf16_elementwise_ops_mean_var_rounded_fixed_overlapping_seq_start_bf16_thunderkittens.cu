// Residual add + LayerNorm as ThunderKittens writes it (HazyResearch/ThunderKittens, kernels/layernorm/non_pc/
// layer_norm.cu: layernorm_tk<D> behind dispatch_layernorm<D> and the fused_layernorm torch entry; the fused
// dropout + residual + LayerNorm of a pre-norm block). bf16 everywhere, d_model a template parameter (1024, the only
// size fused_layernorm accepts): x, residual, o, o_resid [B, N, D]; o_resid = residual + x and o = LayerNorm(o_resid)
// * norm_weight + norm_bias. NUM_WORKERS = 2 warps per block of 64 threads, each warp one row (a "1xD" vector);
// grid B * n_tile_size with n_tile_size = N / 2 and n_per_tile = 2 rows per block; block -> (batch, seq_start).
// The row vectors live in dynamic shared memory laid out as TK's shared_allocator hands them out: x_s[2][NUM_WORKERS]
// and residual_s[2][NUM_WORKERS] (tic / toc double buffers), then norm_weight_s and norm_bias_s (loaded by warp 0),
// mem_size = D * NUM_WORKERS * 2 * 2 * 2 + D * 2 * 2 bytes set through cudaFuncSetAttribute. The math is TK's
// register / shared vector ops on bf16, each rounded to bf16: residual_s += x_s (stored to o_resid), mean = bf16
// sum / bf16(d_model), residual_s -= mean, x_s = residual_s * residual_s, var = bf16 sum / bf16(d_model),
// var = bf16(sqrt(var + bf16(1e-5))), residual_s /= var, *= norm_weight_s, += norm_bias_s, stored to o; lanes own
// the columns lane, lane + 32, ... of their row, the two sums by xor-shuffle butterflies.
// Written without the kittens headers (sv_bf / gl descriptors and load / store / sum / sub / mul / div / add spelled
// out over the lanes); the __grid_constant__ norm_globals<D> struct is unpacked into pointer and int arguments in its
// field order (x, residual, o, o_resid, norm_weight, norm_bias, n_tile_size, n_per_tile), rows at
// ((batch * N) + seq) * D as the gl<bf16, -1, -1, -1, -1> descriptors {B, 1, N, D} address them. Changes: the sums
// accumulate in fp32 before their bf16 rounding (TK's vector sum folds in bf16); the cp.async load_async prefetch of
// the next rows and its cuda::barrier are dropped (with n_per_tile = 2 and two workers there is no next block: plain
// loads and a __syncthreads); dropout is left out (norm_globals fixes dropout_p = 0, the mask is an identity).
// Fixed: seq_start = blockIdx.x % n_tile_size made blocks b and b + 1 share a row (block b did rows b, b + 1) and left
// the last N / 2 - 1 rows of every batch unwritten, with two blocks racing on the shared rows' outputs: seq_start is
// now (blockIdx.x % n_tile_size) * n_per_tile. Sizes: 16 x 4096 rows, 1 x 16 rows, 37 x 48 rows (B odd; N % 16 == 0
// as fused_layernorm checks).
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define NUM_WORKERS (2)
#define WARP_THREADS (32)
#define NUM_THREADS (NUM_WORKERS * WARP_THREADS)

using bf16 = __nv_bfloat16;

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) {
        v += __shfl_xor_sync(0xffffffff, v, mask);
    }
    return v;
}

/* kerntune:
args  = ["x: in bf16[B * N * 1024]", "residual: in bf16[B * N * 1024]", "o: out bf16[B * N * 1024]",
         "o_resid: out bf16[B * N * 1024]", "norm_weight: in bf16[1024]", "norm_bias: in bf16[1024]",
         "n_tile_size: i32 = N / 2", "n_per_tile: i32 = 2"]
sizes = [{ B = 16, N = 4096 }, { B = 1, N = 16 }, { B = 37, N = 48 }]
grid  = "B * (N / 2)"
block = 64
smem  = "1024 * 2 * 2 * 2 * 2 + 1024 * 2 * 2"
template_args = ["1024"]
*/
template<int D>
__global__ __launch_bounds__(NUM_THREADS, 1)
void layernorm_tk(const bf16 *__restrict__ x, const bf16 *__restrict__ residual, bf16 *__restrict__ o,
                  bf16 *__restrict__ o_resid, const bf16 *__restrict__ norm_weight,
                  const bf16 *__restrict__ norm_bias, const int n_tile_size, const int n_per_tile) {

    const int warpid = threadIdx.x / WARP_THREADS;
    const int lane   = threadIdx.x % WARP_THREADS;

    const int batch     = blockIdx.x / n_tile_size;
    const int seq_start = (blockIdx.x % n_tile_size) * n_per_tile;  // fixed: was blockIdx.x % n_tile_size
    const int N         = n_tile_size * n_per_tile;

    static constexpr int d_model = D;

    // shared_allocator order: x_s[2][NUM_WORKERS], residual_s[2][NUM_WORKERS], norm_weight_s, norm_bias_s
    extern __shared__ __align__(16) unsigned char __shm[];
    bf16 *x_s           = reinterpret_cast<bf16 *>(__shm);
    bf16 *residual_s    = x_s + 2 * NUM_WORKERS * d_model;
    bf16 *norm_weight_s = residual_s + 2 * NUM_WORKERS * d_model;
    bf16 *norm_bias_s   = norm_weight_s + d_model;

    int tic = 0;

    // global loads
    if (warpid == 0) {
        for (int i = lane; i < d_model; i += WARP_THREADS) {
            norm_bias_s[i]   = norm_bias[i];
            norm_weight_s[i] = norm_weight[i];
        }
    }

    bf16 mean = __float2bfloat16(0.0f);
    bf16 var  = __float2bfloat16(0.0f);

    const int n_blocks = n_per_tile / NUM_WORKERS;
    for (int block = 0; block < n_blocks; block++, tic ^= 1) {
        const int cur_idx = block * NUM_WORKERS + warpid;
        const size_t row  = (size_t)batch * N + seq_start + cur_idx;

        bf16 *xv = x_s + (tic * NUM_WORKERS + warpid) * d_model;
        bf16 *rv = residual_s + (tic * NUM_WORKERS + warpid) * d_model;

        for (int i = lane; i < d_model; i += WARP_THREADS) {
            xv[i] = x[row * d_model + i];
            rv[i] = residual[row * d_model + i];
        }
        __syncthreads();

        // add(residual_s, residual_s, x_s); store(o_resid, residual_s)
        for (int i = lane; i < d_model; i += WARP_THREADS) {
            rv[i] = __hadd(rv[i], xv[i]);
            o_resid[row * d_model + i] = rv[i];
        }

        // sum(mean, residual_s); mean = mean / d_model
        float acc = 0.0f;
        for (int i = lane; i < d_model; i += WARP_THREADS) {
            acc += __bfloat162float(rv[i]);
        }
        mean = __float2bfloat16(warp_sum(acc));
        mean = __hdiv(mean, __float2bfloat16((float)d_model));

        // sub(residual_s, residual_s, mean); mul(x_s, residual_s, residual_s); sum(var, x_s)
        acc = 0.0f;
        for (int i = lane; i < d_model; i += WARP_THREADS) {
            rv[i] = __hsub(rv[i], mean);
            xv[i] = __hmul(rv[i], rv[i]);
            acc += __bfloat162float(xv[i]);
        }
        var = __float2bfloat16(warp_sum(acc));
        var = __hdiv(var, __float2bfloat16((float)d_model));
        var = __float2bfloat16(sqrtf(__bfloat162float(__hadd(var, __float2bfloat16(1e-05f)))));

        // div by the std, mul by norm_weight_s, add norm_bias_s; store(o, residual_s)
        for (int i = lane; i < d_model; i += WARP_THREADS) {
            bf16 v = __hdiv(rv[i], var);
            v = __hmul(v, norm_weight_s[i]);
            v = __hadd(v, norm_bias_s[i]);
            rv[i] = v;
            o[row * d_model + i] = v;
        }
        __syncthreads();
    }
}

// d_x_bf, d_residual_bf, d_o, d_o_resid: device [B, N, D]; d_norm_weight_bf, d_norm_bias_bf: [D]; N % 16 == 0.
template<int D>
void dispatch_layernorm(
    bf16 *d_x_bf,
    bf16 *d_residual_bf,
    bf16 *d_norm_weight_bf,
    bf16 *d_norm_bias_bf,
    bf16 *d_o,
    bf16 *d_o_resid,
    float dropout_p,
    int B, int N,
    cudaStream_t stream
) {
    (void)dropout_p;  // norm_globals::dropout_p is 0
    const int n_tile_size = N / 2;
    const int n_per_tile = 2;

    unsigned long mem_size = D * NUM_WORKERS * 2 * 2 * 2 + D * 2 * 2;
    cudaFuncSetAttribute(
        layernorm_tk<D>,
        cudaFuncAttributeMaxDynamicSharedMemorySize,
        mem_size
    );

    dim3 grid(B * n_tile_size, 1, 1);
    layernorm_tk<D><<<grid, NUM_THREADS, mem_size, stream>>>(
        d_x_bf, d_residual_bf, d_o, d_o_resid, d_norm_weight_bf, d_norm_bias_bf, n_tile_size, n_per_tile);
}

template void dispatch_layernorm<1024>(bf16 *, bf16 *, bf16 *, bf16 *, bf16 *, bf16 *, float, int, int,
                                       cudaStream_t);
