// LayerNorm in the style of Baidu Anakin (the saber layer of the Anakin inference engine:
// saber/funcs/impl/cuda/base/cuda_c/saber_layer_norm.cu, SaberLayerNorm<NV, AK_FLOAT>::dispatch), float:
//   the input viewed as [outer_size, inner_size] around the normalized axis, row-major; out of place; the per-row
//   statistics kept in the layer's own _mean and _std tensors [outer_size]
//   Anakin runs three kernels (reduce_mean and reduce_std, one block of CUDA_NUM_THREADS = 512 per row, then a
//   CUDA_KERNEL_LOOP normalize over the flat index); here they are one kernel with the same pieces: one block per
//   row of 512 threads, template <blockSize, dtype, flag_scale, flag_bias>, argument order total_size, inner_size,
//   eps, src, mean, std, scale, bias, dst as Anakin's kernels take them
//   each reduction: every thread sums its block-strided slice into extern __shared__ sdata[tid]
//   (CUDA_NUM_THREADS * sizeof(dtype) bytes from the launcher), an UNROLLED halving tree guarded by blockSize
//   (512 ... 64, a __syncthreads per step), then the last warp through a volatile pointer (32 ... 1); thread 0
//   divides by inner_size
//   two passes over global memory: the mean, then sum((x - mean)^2) / inner_size; Anakin's std is
//   1 / (sqrtf(var) + eps): eps OUTSIDE the square root, stored per row
//   dst = (src - mean) * std * scale + bias, the flag_scale / flag_bias branches as template flags
//   host: four instantiations picked by the scale / bias flags, the compute stream of the context
// Fixed: the volatile last-warp steps relied on implicit warp-synchronous execution, which Volta and later do
// not guarantee (a read of vsum[tid + k] can see a partner's value from before its previous step): __syncwarp()
// after each step. The fusion adds the barriers that the kernel boundaries gave (statistics published through
// __shared__ before any thread uses them, sdata reused only after everyone has read the mean).
#include <cuda_runtime.h>

#include <math.h>

namespace anakin {

namespace saber {

const int CUDA_NUM_THREADS = 512;

template <unsigned int blockSize, typename dtype>
__device__ __forceinline__ void smem_tree_sum(dtype* sdata, int tid) {
    if (blockSize >= 1024) {
        if (tid < 512) {
            sdata[tid] += sdata[tid + 512];
        }
        __syncthreads();
    }
    if (blockSize >= 512) {
        if (tid < 256) {
            sdata[tid] += sdata[tid + 256];
        }
        __syncthreads();
    }
    if (blockSize >= 256) {
        if (tid < 128) {
            sdata[tid] += sdata[tid + 128];
        }
        __syncthreads();
    }
    if (blockSize >= 128) {
        if (tid < 64) {
            sdata[tid] += sdata[tid + 64];
        }
        __syncthreads();
    }
    if (tid < 32) {
        volatile dtype* vsum = sdata;
        if (blockSize >= 64) {
            vsum[tid] += vsum[tid + 32];
            __syncwarp();
        }
        if (blockSize >= 32) {
            vsum[tid] += vsum[tid + 16];
            __syncwarp();
        }
        if (blockSize >= 16) {
            vsum[tid] += vsum[tid + 8];
            __syncwarp();
        }
        if (blockSize >= 8) {
            vsum[tid] += vsum[tid + 4];
            __syncwarp();
        }
        if (blockSize >= 4) {
            vsum[tid] += vsum[tid + 2];
            __syncwarp();
        }
        if (blockSize >= 2) {
            vsum[tid] += vsum[tid + 1];
            __syncwarp();
        }
    }
}

/* kerntune:
args  = ["total_size: i32 = outer * inner", "inner_size: i32 = inner", "eps: f32 = 1e-5",
         "src: in f32[outer * inner]", "mean: out f32[outer]", "std: out f32[outer]", "scale: in f32[inner]",
         "bias: in f32[inner]", "dst: out f32[outer * inner]"]
sizes = [{ outer = 16384, inner = 1024 }, { outer = 4, inner = 4096 }, { outer = 999, inner = 1003 }]
grid  = "outer"
block = 512
smem  = 2048
template_args = ["512", "float", "true", "true"]
*/
template <unsigned int blockSize, typename dtype, bool flag_scale, bool flag_bias>
__global__ void layer_norm_fwd_kernel(int total_size, int inner_size, const dtype eps, \
        const dtype* src, dtype* mean, dtype* std, \
        const dtype* scale, const dtype* bias, dtype* dst) {

    extern __shared__ char sdata_raw[];
    dtype* sdata = reinterpret_cast<dtype*>(sdata_raw);
    __shared__ dtype s_mean;
    __shared__ dtype s_std;

    int tid = threadIdx.x;
    const dtype* src_row = src + blockIdx.x * inner_size;
    dtype* dst_row = dst + blockIdx.x * inner_size;

    //! get mean
    sdata[tid] = (dtype)0;
    for (int j = tid; j < inner_size; j += blockSize) {
        sdata[tid] += src_row[j];
    }
    __syncthreads();
    smem_tree_sum<blockSize, dtype>(sdata, tid);
    if (tid == 0) {
        s_mean = sdata[0] / inner_size;
        mean[blockIdx.x] = s_mean;
    }
    __syncthreads();

    //! get std
    const dtype m = s_mean;
    sdata[tid] = (dtype)0;
    for (int j = tid; j < inner_size; j += blockSize) {
        sdata[tid] += (src_row[j] - m) * (src_row[j] - m);
    }
    __syncthreads();
    smem_tree_sum<blockSize, dtype>(sdata, tid);
    if (tid == 0) {
        dtype var = sdata[0] / inner_size;
        s_std = 1.f / (sqrtf(var) + eps);
        std[blockIdx.x] = s_std;
    }
    __syncthreads();

    //! normalize with scale and bias
    const dtype s = s_std;
    for (int j = tid; j < inner_size; j += blockSize) {
        if (flag_scale) {
            if (flag_bias) {
                dst_row[j] = (src_row[j] - m) * s * scale[j] + bias[j];
            } else {
                dst_row[j] = (src_row[j] - m) * s * scale[j];
            }
        } else {
            if (flag_bias) {
                dst_row[j] = (src_row[j] - m) * s + bias[j];
            } else {
                dst_row[j] = (src_row[j] - m) * s;
            }
        }
    }
}

// SaberLayerNorm<NV, AK_FLOAT>::dispatch: src / dst device [outer_size, inner_size]; mean_ptr / std_ptr the
// layer's [outer_size] buffers; scale / bias [inner_size]; stream = this->_ctx->get_compute_stream().
void layer_norm_dispatch(const float* src, float* dst, float* mean_ptr, float* std_ptr,
        const float* scale_ptr, const float* bias_ptr, int outer_size, int inner_size, float eps,
        bool flag_scale, bool flag_bias, cudaStream_t stream) {

    int total_size = outer_size * inner_size;
    const size_t share_mem_size = CUDA_NUM_THREADS * sizeof(float);

    if (flag_scale) {
        if (flag_bias) {
            layer_norm_fwd_kernel<CUDA_NUM_THREADS, float, true, true>\
                <<<outer_size, CUDA_NUM_THREADS, share_mem_size, stream>>>\
                (total_size, inner_size, eps, src, mean_ptr, std_ptr, scale_ptr, bias_ptr, dst);
        } else {
            layer_norm_fwd_kernel<CUDA_NUM_THREADS, float, true, false>\
                <<<outer_size, CUDA_NUM_THREADS, share_mem_size, stream>>>\
                (total_size, inner_size, eps, src, mean_ptr, std_ptr, scale_ptr, bias_ptr, dst);
        }
    } else {
        if (flag_bias) {
            layer_norm_fwd_kernel<CUDA_NUM_THREADS, float, false, true>\
                <<<outer_size, CUDA_NUM_THREADS, share_mem_size, stream>>>\
                (total_size, inner_size, eps, src, mean_ptr, std_ptr, scale_ptr, bias_ptr, dst);
        } else {
            layer_norm_fwd_kernel<CUDA_NUM_THREADS, float, false, false>\
                <<<outer_size, CUDA_NUM_THREADS, share_mem_size, stream>>>\
                (total_size, inner_size, eps, src, mean_ptr, std_ptr, scale_ptr, bias_ptr, dst);
        }
    }
}

} //namespace saber

} //namespace anakin
