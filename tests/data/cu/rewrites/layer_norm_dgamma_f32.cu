// Layer-norm backward, weight and bias gradients (fp32): one thread per feature walks down the tokens with two
// accumulators (dgamma = sum dy * xhat, dbeta = sum dy), as a simple backward pass writes it.
/* kerntune:
args  = ["dy: in f32[tokens * hidden]", "xhat: in f32[tokens * hidden]", "dgamma: out f32[hidden]", "dbeta: out f32[hidden]", "tokens: i32 = tokens", "hidden: i32 = hidden"]
sizes = [{ tokens = 4096, hidden = 4096 }, { tokens = 257, hidden = 2053 }]
grid  = "cdiv(hidden, 256)"
block = "256"
rtol  = 1e-4
atol  = 1e-3
*/
extern "C" __global__ void ln_bwd_dgamma_dbeta(const float* dy, const float* xhat, float* dgamma, float* dbeta,
                                               int tokens, int hidden) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= hidden) return;
  float g = 0.f, b = 0.f;
  for (int t = 0; t < tokens; ++t) {
    const float d = dy[(long)t * hidden + j];
    g += d * xhat[(long)t * hidden + j];
    b += d;
  }
  dgamma[j] = g;
  dbeta[j] = b;
}

void ln_bwd_params(const float* dy, const float* xhat, float* dgamma, float* dbeta, int tokens, int hidden) {
  ln_bwd_dgamma_dbeta<<<(hidden + 255) / 256, 256>>>(dy, xhat, dgamma, dbeta, tokens, hidden);
}
