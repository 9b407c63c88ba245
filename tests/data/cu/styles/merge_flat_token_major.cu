// merge attention states fp32, one flat index, values [tokens, heads, head_dim], lse [tokens, heads], no output lse
/* kerntune:
args  = ["v_a: in f32[T * H * D]", "s_a: in f32[T * H]", "v_b: in f32[T * H * D]", "s_b: in f32[T * H]", "v_out: out f32[T * H * D]", "T: i32 = T", "H: i32 = H", "D: i32 = D"]
sizes = [{ T = 512, H = 32, D = 128 }, { T = 33, H = 7, D = 80 }]
grid  = "cdiv(T * H * D, 256)"
block = "256"
*/
__global__ void merge_states(const float* v_a, const float* s_a, const float* v_b, const float* s_b, float* v_out,
                             int T, int H, int D) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)T * H * D) return;
  long th = i / D;
  float la = s_a[th], lb = s_b[th];
  float mx = fmaxf(la, lb);
  float wa = expf(la - mx), wb = expf(lb - mx);
  v_out[i] = (v_a[i] * wa + v_b[i] * wb) / (wa + wb);
}

void merge(const float* v_a, const float* s_a, const float* v_b, const float* s_b, float* v_out, int T, int H, int D) {
  merge_states<<<(T * H * D + 255) / 256, 256>>>(v_a, s_a, v_b, s_b, v_out, T, H, D);
}
