// Rotary embedding as Yandex Research's Hogwild! Inference writes it (inference_lib/src/rope.cuh, rope_kernel behind
// rope_gpu; parallel LLM "workers" decoding into a shared KV cache, each query rotated for several cache views), bf16,
// out of place with a FAN-OUT: each query is rotated F times, once per view, each with its own angles:
//   queries:          [W, Hq, S, E]     (W workers, head-major: heads before positions)
//   rotated_queries:  [F, W, Hq, S, E]  (F rotated copies)
//   cosines, sines:   float [F, W, S, E], FULL width (E entries per row: separate values for e and e + E / 2), already
//                     gathered per (view, worker, position) by the caller: no position ids, no cache lookup
//   out[e] = x1 * cos[e] - x2 * sin[e], out[e + E/2] = x2 * cos[e + E/2] + x1 * sin[e + E/2], x1 = q[e], x2 =
//   q[e + E/2] (NeoX halves), float math, one rounding on the store
// Hogwild!'s conventions: grid (F * S, Hq, W) with the view and position unpacked from blockIdx.x (f = x / S,
// s = x % S), heads on y, workers on z, one block of E / 2 threads per (view, worker, head, position), one pair per
// thread, int index arithmetic, implicit scalar_t <-> float conversions, template <class scalar_t> launcher on the
// default stream, argument order (out, in, cosines, sines, F, W, Hq, S, E).
// cos / sin uniform(-1, 1).
#include <cuda_runtime.h>
#include <cuda_bf16.h>

/* kerntune:
args  = ["rotated_queries: out bf16[F * W * Hq * S * E]", "queries: in bf16[W * Hq * S * E]",
         "cosines: in f32[F * W * S * E] ~ uniform(-1, 1)", "sines: in f32[F * W * S * E] ~ uniform(-1, 1)",
         "F: i32 = F", "W: i32 = W", "Hq: i32 = Hq", "S: i32 = S", "E: i32 = E"]
sizes = [{ F = 3, W = 2, Hq = 40, S = 2048, E = 128 }, { F = 3, W = 2, Hq = 40, S = 1, E = 128 },
         { F = 2, W = 3, Hq = 7, S = 333, E = 80 }]
grid  = ["F * S", "Hq", "W"]
block = "E / 2"
template_args = ["__nv_bfloat16"]
*/
template<class scalar_t>
__global__ void rope_kernel(
        scalar_t* rotated_queries, const scalar_t* queries, const float* cosines, const float* sines,
        int F, int W, int Hq, int S, int E)
{
    int f = blockIdx.x / S;
    int s = blockIdx.x % S;
    int h = blockIdx.y;
    int w = blockIdx.z;

    const scalar_t* query = queries + ((w * Hq + h) * S + s) * E;
    scalar_t* result = rotated_queries + (((f * W + w) * Hq + h) * S + s) * E;
    int e = threadIdx.x;
    float x1 = query[e];
    float x2 = query[e + E/2];

    // the pair (x1, x2) is one complex number, rotated by this view's angle
    int offset = (((f * W + w) * S + s) * E);

    result[e] = x1 * cosines[offset + e] - x2 * sines[offset + e];
    result[e + E/2] = x2 * cosines[offset + e + E/2] + x1 * sines[offset + e + E/2];
}

// rotated_queries [F, W, Hq, S, E], queries [W, Hq, S, E] on the device; cosines / sines [F, W, S, E] float.
template<class scalar_t>
void rope_gpu(
        scalar_t* rotated_queries, const scalar_t* queries, const float* cosines, const float* sines,
        int F, int W, int Hq, int S, int E) {
    dim3 grid_dim(F*S , Hq, W);
    dim3 block_dim(E/2, 1, 1);
    rope_kernel<<<grid_dim, block_dim>>>(rotated_queries, queries, cosines, sines, F, W, Hq, S, E);
}

template void rope_gpu<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, const float*, const float*, int, int,
                                      int, int, int);
