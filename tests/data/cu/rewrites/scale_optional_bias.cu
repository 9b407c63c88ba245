// y = x * scale (+ bias when given): a grid-stride loop written over locals (the thread's global index, the
// grid's thread count, the block size), an optional bias tested against null per element.
/* kerntune:
args  = ["y: out f32[n]", "x: in f32[n]", "bias: in f32[n]", "scale: f32 = 0.5", "n: i64 = n"]
sizes = [{ n = 16777216 }, { n = 100003 }]
grid  = "min(cdiv(n, 256), 4096)"
block = "256"
*/
__global__ void scale_optional_bias(float* y, const float* x, const float* bias, float scale, long long n) {
  const int nthreads = blockDim.x;
  const long long gtid = (long long)blockIdx.x * nthreads + threadIdx.x;
  const long long stride = (long long)nthreads * gridDim.x;
  for (long long i = gtid; i < n; i += stride) {
    const float b = bias != nullptr ? bias[i] : 0.f;
    y[i] = x[i] * scale + b;
  }
}

void scale_bias(float* y, const float* x, const float* bias, float scale, long long n) {
  long long blocks = (n + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  scale_optional_bias<<<(int)blocks, 256>>>(y, x, bias, scale, n);
}
