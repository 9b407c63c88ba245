// Fused residual add + RMSNorm in the style of electrock_infer (a small vLLM-like inference engine's own
// csrc layernorm kernels: add_rms_norm_kernel behind add_rms_norm(input, residual, epsilon, weight)), bf16:
//   BOTH tensors are updated IN PLACE, as the engine's decoder layer expects: residual = input + residual,
//   input = rmsnorm(residual) * weight; input, residual [num_tokens, hidden] bf16, weight [hidden] bf16
//   argument order input, residual, weihgt (sic), hiddsize, eps; non-const pointers, eps in T_ACC = float
//   template <scalar_t, T_ACC, Seme_size = warps per block, num_per_Threads = 8>, __launch_bounds__(1024)
//   one token per block; each thread owns 8 CONSECUTIVE elements in register arrays moved whole by the
//   FETCH_FLOAT4 macro (one 16-byte access: reinterpret_cast<float4*>), idx = row * hiddsize + col * 8
//   the add is done in scalar_t: reg_res[i] += reg_input[i] is a bf16 add, ROUNDED to bf16 before squaring and
//   before the store; squares accumulated in float
//   reduction: __shfl_down butterfly in each warp, lane 0 to __shared__ smem_val[Seme_size], warp 0 folds the
//   Seme_size partials with a second __shfl_down loop from Seme_size / 2, thread 0 writes s_rms_val =
//   rsqrt(val / hiddsize + eps); out = float(res) * float(w) * rms (that product order), rounded once
//   host: blocks of 128 / 256 / 512 / 1024 threads for hidden <= 1024 / 2048 / 4096 / larger, each its own
//   instantiation (Seme_size = threads / 32), default stream; the sizes here all take the 512-thread one
// Changed / fixed: WARP_SIZE is 32 with __shfl_down_sync (the file targets ROCm: WARP_SIZE 64, __shfl_down);
// the column guard col_idx < hiddsize, commented out in the original, is restored (without it any hidden below
// 8 * threads read and wrote past the row; the host accepted only hidden == 4096), the host now requires
// hidden % 8 == 0 and hidden <= 8192 (one row in one block); the register arrays are __align__(16) so the
// float4 copies are aligned.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>

#define WARP_SIZE 32
#define FETCH_FLOAT4(pointer) (reinterpret_cast<float4*>(&(pointer))[0])

namespace electrock_infer {

/* kerntune:
args  = ["input: inout bf16[num_tokens * hidden]", "residual: inout bf16[num_tokens * hidden]",
         "weihgt: in bf16[hidden]", "hiddsize: i32 = hidden", "eps: f32 = 1e-5"]
sizes = [{ num_tokens = 8192, hidden = 4096 }, { num_tokens = 4, hidden = 4096 }, { num_tokens = 999, hidden = 2952 }]
grid  = "num_tokens"
block = 512
template_args = ["__nv_bfloat16", "float", "16", "8"]
*/
template <typename scalar_t, typename T_ACC, int Seme_size, int num_per_Threads>
__global__ __launch_bounds__(1024) void add_rms_norm_kernel(scalar_t* input, scalar_t* residual, scalar_t* weihgt,
                                                            int hiddsize, T_ACC eps) {
    __shared__ T_ACC smem_val[Seme_size];
    __shared__ T_ACC s_rms_val;

    int col = threadIdx.x;
    int row = blockIdx.x;
    int laneid = col & (WARP_SIZE - 1);
    int wid = col / WARP_SIZE;

    unsigned int idx = row * hiddsize + col * num_per_Threads;
    unsigned int col_idx = col * num_per_Threads;

    __align__(16) scalar_t reg_input[num_per_Threads];
    __align__(16) scalar_t reg_res[num_per_Threads];

    T_ACC r_rms_val;
    T_ACC val = (T_ACC)0;
    if (col_idx < hiddsize) {
        FETCH_FLOAT4(reg_input[0]) = FETCH_FLOAT4(input[idx]);
        FETCH_FLOAT4(reg_res[0]) = FETCH_FLOAT4(residual[idx]);
        for (int i = 0; i < num_per_Threads; i++) {
            reg_res[i] += reg_input[i];
            val += static_cast<T_ACC>(reg_res[i]) * static_cast<T_ACC>(reg_res[i]);
        }
    }
    for (int stride = WARP_SIZE / 2; stride > 0; stride >>= 1) {
        val += __shfl_down_sync(0xffffffff, val, stride, WARP_SIZE);
    }

    if (laneid == 0) {
        smem_val[wid] = val;
    }
    __syncthreads();

    val = (col < Seme_size) ? smem_val[col] : 0;
    if (wid == 0) {
        for (int stride = Seme_size / 2; stride > 0; stride >>= 1) {
            val += __shfl_down_sync(0xffffffff, val, stride, WARP_SIZE);
        }
    }

    if (col == 0) {
        s_rms_val = rsqrtf(val / hiddsize + eps);
    }
    __syncthreads();
    r_rms_val = s_rms_val;

    __align__(16) scalar_t reg_weihgt[num_per_Threads];

    if (col_idx < hiddsize) {
        FETCH_FLOAT4(reg_weihgt[0]) = FETCH_FLOAT4(weihgt[col_idx]);
        for (int i = 0; i < num_per_Threads; i++) {
            reg_input[i] = static_cast<T_ACC>(reg_res[i]) * static_cast<T_ACC>(reg_weihgt[i]) * r_rms_val;
        }
        FETCH_FLOAT4(residual[idx]) = FETCH_FLOAT4(reg_res[0]);
        FETCH_FLOAT4(input[idx]) = FETCH_FLOAT4(reg_input[0]);
    }
}

// With residual, residual is modified in place as well (x = x + residual; residual = x; x = norm(x)).
// input_data, res_data: device [num_tokens, hidden_size]; weight_data: device [hidden_size].
void add_rms_norm(__nv_bfloat16* input_data, __nv_bfloat16* res_data, __nv_bfloat16* weight_data, int num_tokens,
                  int hidden_size, double epsilon) {
    if (hidden_size % 8 != 0) throw std::invalid_argument("hidden_size may not fit for this kernel");
    if (hidden_size > 8 * 1024) throw std::invalid_argument("hidden_size too large for one block");
    using scalar_t = __nv_bfloat16;
    using T_ACC = float;
    T_ACC eps = epsilon;
    if (hidden_size <= 1024) {
        add_rms_norm_kernel<scalar_t, T_ACC, (128 / WARP_SIZE), 8><<<num_tokens, 128>>>(
            input_data, res_data, weight_data, hidden_size, eps);
    } else if (hidden_size <= 2048) {
        add_rms_norm_kernel<scalar_t, T_ACC, (256 / WARP_SIZE), 8><<<num_tokens, 256>>>(
            input_data, res_data, weight_data, hidden_size, eps);
    } else if (hidden_size <= 4096) {
        add_rms_norm_kernel<scalar_t, T_ACC, (512 / WARP_SIZE), 8><<<num_tokens, 512>>>(
            input_data, res_data, weight_data, hidden_size, eps);
    } else {
        add_rms_norm_kernel<scalar_t, T_ACC, (1024 / WARP_SIZE), 8><<<num_tokens, 1024>>>(
            input_data, res_data, weight_data, hidden_size, eps);
    }
}

}  // namespace electrock_infer
