"""Probe, on the GPU, what keeps 16-bit row kernels (LayerNorm, softmax over 4k-wide rows) below 85% of copy
bandwidth in the experts: registers and rows in flight, rows looped in one block with the next row's load in
flight, one fused reduction. Hand-written variants over the experts' own helpers (templates/experts/_common.cuh);
timed with CUDA events over 50 launches, the median of 7 repeats; outputs checked against a float64 reference.

    python gpu/experiments/row_pipeline_probe.py > $OUT/row_pipeline_probe.txt
"""
import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]

SRC = r"""
#include "_common.cuh"
using namespace kt;

template <typename T, int VEC, int IT>
__device__ __forceinline__ void raw_load(const T* __restrict__ p, int n, Vec<T, VEC> (&raw)[IT]) {
#pragma unroll
  for (int i = 0; i < IT; ++i) {
    const int e = (i * (int)blockDim.x + (int)threadIdx.x) * VEC;
    if (e < n) raw[i] = *reinterpret_cast<const Vec<T, VEC>*>(p + e);
    else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) raw[i].v[j] = from_f<T>(0.f);
    }
  }
}

// LayerNorm: LOOP rows per block one after another; PF: the next row's load issued before this row's reductions.
template <typename T, int VEC, int IT, int LOOP, int PF>
__device__ __forceinline__ void ln(T* out, const T* x, const T* g, const T* b, float eps, int rows, int hidden) {
  Vec<T, VEC> gr[IT], br[IT], cur[IT];
  const int row0 = blockIdx.x * LOOP;
  raw_load<T, VEC, IT>(x + (long long)row0 * hidden, hidden, cur);
  raw_load<T, VEC, IT>(g, hidden, gr);
  raw_load<T, VEC, IT>(b, hidden, br);
  for (int l = 0; l < LOOP; ++l) {
    const int row = row0 + l;
    if (row >= rows) break;
    Vec<T, VEC> nxt[IT];
    if (l > 0 && !PF) raw_load<T, VEC, IT>(x + (long long)row * hidden, hidden, cur);
    if (PF && l + 1 < LOOP && row + 1 < rows) raw_load<T, VEC, IT>(x + (long long)(row + 1) * hidden, hidden, nxt);
    float v[IT][VEC];
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < IT; ++i)
#pragma unroll
      for (int j = 0; j < VEC; ++j) { v[i][j] = to_f(cur[i].v[j]); s += v[i][j]; }
    const float mean = row_reduce<0, 1, 0>(s, Sum(), 0.f) / (float)hidden;
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < IT; ++i)
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float d = (i * (int)blockDim.x + (int)threadIdx.x) * VEC < hidden ? v[i][j] - mean : 0.f;
        q += d * d;
      }
    const float inv = rsqrtf(row_reduce<0, 1, 1>(q, Sum(), 0.f) / (float)hidden + eps);
#pragma unroll
    for (int i = 0; i < IT; ++i) {
      const int e = (i * (int)blockDim.x + (int)threadIdx.x) * VEC;
      float o[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) o[j] = (v[i][j] - mean) * inv * to_f(gr[i].v[j]) + to_f(br[i].v[j]);
      if (e < hidden) store_vec<T, VEC>(out + (long long)row * hidden + e, o);
    }
    if (PF) {
#pragma unroll
      for (int i = 0; i < IT; ++i) cur[i] = nxt[i];
    }
  }
}

// Softmax. ONLINE: one reduction of (max, sum) pairs instead of a max then a sum.
template <typename T, int VEC, int IT, int LOOP, int PF, int ONLINE>
__device__ __forceinline__ void sm(T* out, const T* x, int rows, int hidden) {
  Vec<T, VEC> cur[IT];
  const int row0 = blockIdx.x * LOOP;
  raw_load<T, VEC, IT>(x + (long long)row0 * hidden, hidden, cur);
  __shared__ float pm[32], ps[32];
  for (int l = 0; l < LOOP; ++l) {
    const int row = row0 + l;
    if (row >= rows) break;
    Vec<T, VEC> nxt[IT];
    if (l > 0 && !PF) raw_load<T, VEC, IT>(x + (long long)row * hidden, hidden, cur);
    if (PF && l + 1 < LOOP && row + 1 < rows) raw_load<T, VEC, IT>(x + (long long)(row + 1) * hidden, hidden, nxt);
    float v[IT][VEC];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < IT; ++i)
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        v[i][j] = to_f(cur[i].v[j]);
        if ((i * (int)blockDim.x + (int)threadIdx.x) * VEC < hidden) m = fmaxf(m, v[i][j]);
      }
    float s = 0.f, scale;
    if (ONLINE) {
#pragma unroll
      for (int i = 0; i < IT; ++i)
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float e = (i * (int)blockDim.x + (int)threadIdx.x) * VEC < hidden ? __expf(v[i][j] - m) : 0.f;
          v[i][j] = e; s += e;
        }
      // combine (m, s) pairs: warp, then the warps' pairs through shared memory
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        const float mm = fmaxf(m, m2);
        s = (m == -INFINITY ? 0.f : s * __expf(m - mm)) + (m2 == -INFINITY ? 0.f : s2 * __expf(m2 - mm));
        m = mm;
      }
      const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
      const float mine = m;
      if (lane == 0) { pm[warp] = m; ps[warp] = s; }
      __syncthreads();
      float wm = lane < nw ? pm[lane] : -INFINITY, ws = lane < nw ? ps[lane] : 0.f;
      __syncthreads();
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, wm, o), s2 = __shfl_xor_sync(0xffffffffu, ws, o);
        const float mm = fmaxf(wm, m2);
        ws = (wm == -INFINITY ? 0.f : ws * __expf(wm - mm)) + (m2 == -INFINITY ? 0.f : s2 * __expf(m2 - mm));
        wm = mm;
      }
      scale = __expf(mine - wm) / ws;
    } else {
      m = row_reduce<0, 1, 0>(m, Max(), -INFINITY);
#pragma unroll
      for (int i = 0; i < IT; ++i)
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float e = (i * (int)blockDim.x + (int)threadIdx.x) * VEC < hidden ? expf(v[i][j] - m) : 0.f;
          v[i][j] = e; s += e;
        }
      s = row_reduce<0, 1, 1>(s, Sum(), 0.f);
      scale = 1.f / s;
    }
#pragma unroll
    for (int i = 0; i < IT; ++i) {
      const int e = (i * (int)blockDim.x + (int)threadIdx.x) * VEC;
      float o[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) o[j] = v[i][j] * scale;
      if (e < hidden) store_vec<T, VEC>(out + (long long)row * hidden + e, o);
    }
    if (PF) {
#pragma unroll
      for (int i = 0; i < IT; ++i) cur[i] = nxt[i];
    }
  }
}
"""

LN = [(VEC, IT, LOOP, PF, B) for (VEC, IT) in [(8, 2), (8, 4), (8, 1)] for LOOP, PF in [(1, 0), (2, 0), (4, 0), (2, 1), (4, 1), (8, 1)]
      for B in (0, 1)]
SM = [(VEC, IT, LOOP, PF, ON, B) for (VEC, IT) in [(8, 2), (4, 4), (8, 4)] for LOOP, PF in [(1, 0), (2, 1), (4, 1), (8, 1)]
      for ON in (0, 1) for B in (0, 1)]


def bounds(threads, b):  # b=0: the experts' (1024); b=1: the block's own size
    return 1024 if b == 0 else threads


def build(hidden):
    lines = [SRC]
    for T, tn in (("__nv_bfloat16", "bf16"), ("__half", "fp16")):
        for VEC, IT, LOOP, PF, B in LN:
            thr = hidden // (VEC * IT)
            lines.append(f'extern "C" __global__ void __launch_bounds__({bounds(thr, B)}) ln_{tn}_{VEC}_{IT}_{LOOP}_{PF}_{B}'
                         f'({T}* o, const {T}* x, const {T}* g, const {T}* b, float eps, int rows, int hidden)'
                         f' {{ ln<{T}, {VEC}, {IT}, {LOOP}, {PF}>(o, x, g, b, eps, rows, hidden); }}')
        for VEC, IT, LOOP, PF, ON, B in SM:
            thr = hidden // (VEC * IT)
            lines.append(f'extern "C" __global__ void __launch_bounds__({bounds(thr, B)}) sm_{tn}_{VEC}_{IT}_{LOOP}_{PF}_{ON}_{B}'
                         f'({T}* o, const {T}* x, int rows, int hidden) {{ sm<{T}, {VEC}, {IT}, {LOOP}, {PF}, {ON}>(o, x, rows, hidden); }}')
    d = Path(tempfile.mkdtemp())
    (d / "probe.cu").write_text("\n".join(lines))
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-std=c++17", f"-I{ROOT / 'templates' / 'experts'}",
                    "-Xptxas=-v", "-o", str(d / "probe.cubin"), str(d / "probe.cu")], check=True,
                   stderr=open(d / "ptxas.txt", "w"))
    regs = {}
    name = None
    for line in (d / "ptxas.txt").read_text().splitlines():
        if "Compiling entry function" in line:
            name = line.split("'")[1]
        elif "Used" in line and name:
            regs[name] = int(line.split("Used")[1].split("registers")[0])
    return cp.RawModule(path=str(d / "probe.cubin")), regs


def time_us(fn, reps=50, repeats=7):
    fn(); cp.cuda.Device().synchronize()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for _ in range(repeats):
        a.record()
        for _ in range(reps):
            fn()
        b.record(); b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) * 1000 / reps)
    return float(np.median(out))


def main():
    rows, hidden = int(os.environ.get("ROWS", 8192)), int(os.environ.get("HIDDEN", 4096))
    mod, regs = build(hidden)
    src = cp.random.standard_normal(rows * hidden, dtype=cp.float32) * 3 + 1
    dst = cp.empty_like(src)
    nbytes_16 = rows * hidden * 2 * 2
    cpy = cp.empty(rows * hidden // 2, dtype=cp.float32)
    csrc = src[: rows * hidden // 2]
    copy_us = time_us(lambda: cpy.__setitem__(slice(None), csrc))
    copy_bw = nbytes_16 / copy_us / 1e3
    print(f"rows={rows} hidden={hidden}: copy of {nbytes_16 / 1e6:.0f} MB in {copy_us:.1f} us = {copy_bw:.0f} GB/s")
    for tn, dt in (("bf16", cp.dtype("uint16")), ("fp16", cp.float16)):
        if tn == "bf16":
            xf = src.reshape(rows, hidden)
            x = (xf.view(cp.uint32) >> 16).astype(cp.uint16)  # bf16 by truncation
            xr = (x.astype(cp.uint32) << 16).view(cp.float32)
        else:
            x = src.reshape(rows, hidden).astype(cp.float16); xr = x.astype(cp.float32)
        g = x[0].copy(); b = x[1].copy()
        gr, br = xr[0], xr[1]
        out = cp.empty_like(x)
        mean = xr.mean(1, keepdims=True); var = ((xr - mean) ** 2).mean(1, keepdims=True)
        ref_ln = (xr - mean) / cp.sqrt(var + 1e-5) * gr + br
        e = cp.exp(xr - xr.max(1, keepdims=True)); ref_sm = e / e.sum(1, keepdims=True)
        back = (lambda o: (o.astype(cp.uint32) << 16).view(cp.float32)) if tn == "bf16" else (lambda o: o.astype(cp.float32))
        res = []
        for VEC, IT, LOOP, PF, B in LN:
            name = f"ln_{tn}_{VEC}_{IT}_{LOOP}_{PF}_{B}"
            f = mod.get_function(name); thr = hidden // (VEC * IT); grid = (rows + LOOP - 1) // LOOP
            call = lambda: f((grid,), (thr,), (out, x, g, b, np.float32(1e-5), np.int32(rows), np.int32(hidden)))
            out.fill(0); call(); err = float(cp.abs(back(out) - ref_ln).max())
            us = time_us(call)
            res.append((nbytes_16 / us / 1e3 / copy_bw * 100, name, thr, regs.get(name), us, err))
        for VEC, IT, LOOP, PF, ON, B in SM:
            name = f"sm_{tn}_{VEC}_{IT}_{LOOP}_{PF}_{ON}_{B}"
            f = mod.get_function(name); thr = hidden // (VEC * IT); grid = (rows + LOOP - 1) // LOOP
            call = lambda: f((grid,), (thr,), (out, x, np.int32(rows), np.int32(hidden)))
            out.fill(0); call(); err = float(cp.abs(back(out) - ref_sm).max())
            us = time_us(call)
            res.append((nbytes_16 / us / 1e3 / copy_bw * 100, name, thr, regs.get(name), us, err))
        print(f"\n{tn}: % of copy, kernel (ln: VEC_IT_LOOP_PF_BOUNDS; sm: VEC_IT_LOOP_PF_ONLINE_BOUNDS), threads, registers, us, max abs err")
        for r in sorted(res, key=lambda r: r[1]):
            print(f"{r[0]:6.1f}%  {r[1]:28s} thr={r[2]:4d} regs={r[3]} {r[4]:8.1f} us  err={r[5]:.2e}")


if __name__ == "__main__":
    sys.exit(main())
