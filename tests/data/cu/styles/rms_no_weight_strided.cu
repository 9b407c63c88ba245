// RMSNorm without a weight (a separate multiply follows), fp32, a row stride argument, warp per row, one row per block
/* kerntune:
args  = ["x: in f32[nrows * ncols]", "dst: out f32[nrows * ncols]", "ncols: i32 = ncols", "stride_row: i64 = ncols",
         "eps: f32 = 1e-6"]
sizes = [{ nrows = 512, ncols = 4096 }, { nrows = 21, ncols = 1003 }]
grid  = "nrows"
block = "32"
*/
static __global__ void rms_norm_nw(const float* x, float* dst, const int ncols, const long long stride_row, const float eps) {
  const float* xr = x + blockIdx.x * stride_row;
  float* dr = dst + blockIdx.x * stride_row;
  float tmp = 0.0f;
  for (int col = threadIdx.x; col < ncols; col += 32) tmp += xr[col] * xr[col];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) tmp += __shfl_xor_sync(0xffffffff, tmp, off, 32);
  const float scale = rsqrtf(tmp / ncols + eps);
  for (int col = threadIdx.x; col < ncols; col += 32) dr[col] = scale * xr[col];
}

void rms_norm_f32_cuda(const float* x, float* dst, int ncols, int nrows, float eps, cudaStream_t stream) {
  rms_norm_nw<<<nrows, 32, 0, stream>>>(x, dst, ncols, ncols, eps);
}
