// Decode-step attention probabilities with sinks, fp32, in place: scores [tokens, heads, k_len] (one query a token,
// the head of row r is r % heads), a key-padding mask [tokens, k_len] shared by a token's heads added to them, then
// the head's sink logit (fp32 [heads]) joins the row's max and its sum, with no column of its own (gpt-oss eager
// attention: softmax(cat([scores + mask, sink]))[..., :-1]). One block of 128 threads a row, shared-memory trees.
/* kerntune:
args  = ["logits: inout f32[tokens * heads * k_len]", "mask: in f32[tokens * k_len] ~ uniform(-4, 0)",
         "sinks: in f32[heads] ~ uniform(-2, 6)", "tokens: i32 = tokens", "heads: i32 = heads", "k_len: i32 = k_len"]
sizes = [{ tokens = 16, heads = 32, k_len = 2048 }, { tokens = 5, heads = 12, k_len = 333 }]
grid  = "tokens * heads"
block = "128"
atol  = 1e-6
*/
__global__ void decode_sink_softmax_f32(float* logits, const float* mask, const float* sinks, int tokens, int heads,
                                        int k_len) {
  __shared__ float red[128];
  const int row = blockIdx.x;
  if (row >= tokens * heads) return;
  const int h = row % heads;
  float* l = logits + (size_t)row * k_len;
  const float* m = mask + (size_t)(row / heads) * k_len;
  float mx = -INFINITY;
  for (int k = threadIdx.x; k < k_len; k += 128) mx = fmaxf(mx, l[k] + m[k]);
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int s = 64; s; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float sink = sinks[h];
  mx = fmaxf(red[0], sink);
  __syncthreads();
  float sum = 0.f;
  for (int k = threadIdx.x; k < k_len; k += 128) sum += expf(l[k] + m[k] - mx);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = 64; s; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.f / (red[0] + expf(sink - mx));
  for (int k = threadIdx.x; k < k_len; k += 128) l[k] = expf(l[k] + m[k] - mx) * inv;
}
