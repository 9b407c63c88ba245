// Helper kernels of the GPU worker (agent_core/gpu_worker.py): input fill, output compare, a spin kernel.
// Every entry is extern "C" and named kt_<job>_<dtype>, dtype one of the spec's (f32 f16 bf16 f64 i8 u8
// i16 u16 i32 u32 i64 u64).
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <type_traits>

// ------------------------------------------------------------------ counter-based RNG (splitmix64)
__device__ __forceinline__ unsigned long long kt_mix(unsigned long long x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// uniform in [0, 1) from 53 random bits
__device__ __forceinline__ double kt_unit(unsigned long long h) { return (double)(h >> 11) * 0x1.0p-53; }

template <typename T> __device__ __forceinline__ T kt_from_double(double v) { return (T)v; }
template <> __device__ __forceinline__ __half kt_from_double<__half>(double v) { return __double2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 kt_from_double<__nv_bfloat16>(double v) {
    return __float2bfloat16((float)v);
}

template <typename T> __device__ __forceinline__ double kt_to_double(T v) { return (double)v; }
template <> __device__ __forceinline__ double kt_to_double<__half>(__half v) { return (double)__half2float(v); }
template <> __device__ __forceinline__ double kt_to_double<__nv_bfloat16>(__nv_bfloat16 v) {
    return (double)__bfloat162float(v);
}

template <typename T> struct kt_is_float { static const bool value = false; };
template <> struct kt_is_float<float> { static const bool value = true; };
template <> struct kt_is_float<double> { static const bool value = true; };
template <> struct kt_is_float<__half> { static const bool value = true; };
template <> struct kt_is_float<__nv_bfloat16> { static const bool value = true; };

// dist: 0 normal, 1 uniform(lo, hi), 2 randint(lo, hi) (hi exclusive), 3 ones, 4 zeros.
// Integer buffers draw "normal" as whole numbers in [-64, 64) ([0, 128) when unsigned).
template <typename T>
__device__ void kt_fill(T* out, unsigned long long n, unsigned long long seed, int dist, double lo, double hi) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long key = kt_mix(seed);
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const unsigned long long h1 = kt_mix(key ^ (2 * i));
        double v;
        if (dist == 3) {
            v = 1.0;
        } else if (dist == 4) {
            v = 0.0;
        } else if (dist == 1) {
            v = lo + (hi - lo) * kt_unit(h1);
            if (!kt_is_float<T>::value) v = floor(v);
        } else if (dist == 2) {
            v = floor(lo + (hi - lo) * kt_unit(h1));
            if (v >= hi) v = hi - 1;
        } else if constexpr (kt_is_float<T>::value) {  // normal: Box-Muller
            const unsigned long long h2 = kt_mix(key ^ (2 * i + 1));
            const double u1 = ((double)(h1 >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
            v = sqrt(-2.0 * log(u1)) * cospi(2.0 * kt_unit(h2));
            if (hi != 0.0) v *= hi;  // a scaled draw (the small-magnitude probe); 0 = the standard normal
        } else {
            v = std::is_signed<T>::value ? (double)((long long)(h1 >> 57) - 64) : (double)(h1 >> 57);
        }
        out[i] = kt_from_double<T>(v);
    }
}

// Counts elements of a that differ from ref: |a - ref| > atol + rtol * |ref|, or NaN in one of them only.
// res[0] += count, res[1] = max |a - ref| over finite pairs (as the bits of a non-negative double),
// res[2] = min index of a differing element (start at ~0).  exact != 0: integer compare a != ref.
template <typename T>
__device__ void kt_compare(const T* a, const T* ref, unsigned long long n, double rtol, double atol, int exact,
                           unsigned long long* res) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long bad = 0, first = ~0ull;
    double maxerr = 0.0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        bool differs;
        if (!kt_is_float<T>::value && exact) {
            differs = a[i] != ref[i];
            if (differs) {
                double e = fabs(kt_to_double<T>(a[i]) - kt_to_double<T>(ref[i]));
                maxerr = fmax(maxerr, e);
            }
        } else {
            const double x = kt_to_double<T>(a[i]), y = kt_to_double<T>(ref[i]);
            const bool nx = isnan(x), ny = isnan(y);
            if (nx || ny) {
                differs = nx != ny;
            } else if (isinf(x) || isinf(y)) {
                differs = x != y;
            } else {
                const double e = fabs(x - y);
                maxerr = fmax(maxerr, e);
                differs = e > atol + rtol * fabs(y);
            }
        }
        if (differs) {
            bad++;
            if (i < first) first = i;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        bad += __shfl_xor_sync(0xffffffffu, bad, off);
        unsigned long long f = __shfl_xor_sync(0xffffffffu, first, off);
        first = f < first ? f : first;
        maxerr = fmax(maxerr, __shfl_xor_sync(0xffffffffu, maxerr, off));
    }
    if ((threadIdx.x & 31) == 0) {
        if (bad) {
            atomicAdd(&res[0], bad);
            atomicMin(&res[2], first);
        }
        if (maxerr > 0.0) atomicMax(&res[1], (unsigned long long)__double_as_longlong(maxerr));
    }
}

#define KT_HELPERS(NAME, T)                                                                                   \
    extern "C" __global__ void kt_fill_##NAME(T* out, unsigned long long n, unsigned long long seed, int dist, \
                                              double lo, double hi) {                                         \
        kt_fill<T>(out, n, seed, dist, lo, hi);                                                               \
    }                                                                                                         \
    extern "C" __global__ void kt_compare_##NAME(const T* a, const T* ref, unsigned long long n, double rtol,  \
                                                 double atol, int exact, unsigned long long* res) {           \
        kt_compare<T>(a, ref, n, rtol, atol, exact, res);                                                     \
    }

KT_HELPERS(f32, float)
KT_HELPERS(f64, double)
KT_HELPERS(f16, __half)
KT_HELPERS(bf16, __nv_bfloat16)
KT_HELPERS(i8, int8_t)
KT_HELPERS(u8, uint8_t)
KT_HELPERS(i16, int16_t)
KT_HELPERS(u16, uint16_t)
KT_HELPERS(i32, int32_t)
KT_HELPERS(u32, uint32_t)
KT_HELPERS(i64, long long)
KT_HELPERS(u64, unsigned long long)

// Keeps the GPU busy for `ns` nanoseconds (one thread), so that the launches queued behind it run
// back-to-back, free of host launch latency, when it ends.
extern "C" __global__ void kt_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
