// running attention state updated in place with a new partial (a cascade / chunked-prefill step): fp16 values
// [tokens, heads, dim], natural-log lse laid out [heads, tokens] (head-major, as vLLM's output_lse), an int32 flag a
// token (0: a CUDA-graph padding slot, left untouched), a token count argument, the new partial's arguments first;
// a 1-D grid of warps walking the (token, head) rows grid-stride, lane 0 reading both lse values and broadcasting
// them with shuffles, so its in-place lse write after the row needs no __syncwarp
#include <cuda_fp16.h>
/* kerntune:
args  = ["o_new: in f16[t * h * d]", "lse_new: in f32[h * t] ~ uniform(-4, 12)",
         "acc: inout f16[t * h * d]", "acc_lse: inout f32[h * t] ~ uniform(-4, 12)",
         "valid: in i32[t] ~ randint(0, 2)", "num_tokens: i32 = t", "num_heads: i32 = h", "dim: i32 = d"]
sizes = [{ t = 300, h = 16, d = 128 }, { t = 19, h = 5, d = 100 }]
grid  = ["cdiv(t * h, 8)"]
block = "256"
*/
__global__ void merge_into_running_state(const __half* __restrict__ o_new, const float* __restrict__ lse_new,
                                         __half* __restrict__ acc, float* __restrict__ acc_lse,
                                         const int* __restrict__ valid, int num_tokens, int num_heads, int dim) {
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * blockDim.x / 32;
  for (int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32; row < num_tokens * num_heads; row += warps) {
    const int t = row / num_heads, h = row % num_heads;
    if (!valid[t]) continue;
    const int li = h * num_tokens + t;
    float l_acc = 0.f, l_new = 0.f;
    if (lane == 0) {
      l_acc = acc_lse[li];
      l_new = lse_new[li];
    }
    l_acc = __shfl_sync(0xffffffffu, l_acc, 0);
    l_new = __shfl_sync(0xffffffffu, l_new, 0);
    const float mx = fmaxf(l_acc, l_new);
    const float ea = expf(l_acc - mx), en = expf(l_new - mx);
    const float tot = ea + en;
    const float wa = ea / tot, wn = en / tot;
    __half* r = acc + (size_t)row * dim;
    const __half* rn = o_new + (size_t)row * dim;
    for (int i = lane; i < dim; i += 32) r[i] = __float2half(__half2float(r[i]) * wa + __half2float(rn[i]) * wn);
    if (lane == 0) acc_lse[li] = logf(tot) + mx;
  }
}

void merge_into(const __half* o_new, const float* lse_new, __half* acc, float* acc_lse, const int* valid,
                int num_tokens, int num_heads, int dim, cudaStream_t stream) {
  merge_into_running_state<<<(num_tokens * num_heads + 7) / 8, 256, 0, stream>>>(o_new, lse_new, acc, acc_lse, valid,
                                                                                 num_tokens, num_heads, dim);
}
