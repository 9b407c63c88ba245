"""The column sum's rewrite (outputs_per_thread + cluster_split, as composed from bench/corpus/other/column_sum_f32.cu)
and the hand-written float4 cluster split of 2026-11-24f (gpu/experiments/column_sum_cs3.cu: its cs2.cu with the load
instruction a parameter; the rewrite's kt_load likewise), timed in
ONE harness: 8192 x 4096 fp32, L2 flushed before every launch, CUDA events, the kernels interleaved round by round,
median over rounds; the device copy (cudaMemcpy device to device, bytes read + written) measured the same way.
Answers whether the rewrite's 58.0 us (77% of the check's copy bandwidth) against the hand kernel's 56.0 us (another
harness, another day) is a gap in the code or in the measurement.

    python gpu/experiments/column_sum_same_harness.py prep DIR   # here: compose the rewrite, nvcc every variant
    python gpu/experiments/column_sum_same_harness.py run DIR    # on the GPU (cupy); OUT=... for the json
"""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROWS, COLS = 8192, 4096
# B S C U LOAD (the load instruction: gpu/experiments/column_sum_cs3.cu)
HAND = [(64, 8, 8, 4, ld) for ld in range(9)] + [(32, 16, 4, 8, 0), (32, 16, 4, 8, 1), (32, 16, 4, 8, 2)]
# B OUTS S C LOAD (the rewrite's kt_load with its body switched on KT_LOAD as the hand kernel's LOAD 0, 1, 2, 5)
TWIN = [(b, o, s, c, ld) for (b, o, s, c) in [(32, 2, 16, 4), (32, 4, 8, 8), (64, 4, 8, 8), (32, 2, 8, 8)]
        for ld in (0, 1, 2, 5)]
_KT_LOAD = """template <int N, typename T> __device__ __forceinline__ kt_pack<T, N> kt_load(const T* p, long long k) {
  const kt_pack<T, N>* q = reinterpret_cast<const kt_pack<T, N>*>(p) + k;
  if constexpr (KT_LOAD == 0 || (sizeof(kt_pack<T, N>) != 16 && sizeof(kt_pack<T, N>) != 8)) {
    return *q;
  } else {
    kt_pack<T, N> r;
    unsigned* u = reinterpret_cast<unsigned*>(&r);
    if constexpr (sizeof(kt_pack<T, N>) == 16) {
#define KT_V4(op) asm volatile(op ".v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"(q))
      if constexpr (KT_LOAD == 1) KT_V4("ld.global.nc.L1::no_allocate.L2::256B");
      else if constexpr (KT_LOAD == 2) KT_V4("ld.global.L1::no_allocate.L2::256B");
      else KT_V4("ld.global.nc.L1::no_allocate");
    } else {
#define KT_V2(op) asm volatile(op ".v2.u32 {%0, %1}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"(q))
      if constexpr (KT_LOAD == 1) KT_V2("ld.global.nc.L1::no_allocate.L2::256B");
      else if constexpr (KT_LOAD == 2) KT_V2("ld.global.L1::no_allocate.L2::256B");
      else KT_V2("ld.global.nc.L1::no_allocate");
    }
    return r;
  }
}"""


def prep(out: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from agent_core.source import spec as S
    from agent_core.source.cuda_parse import parse_cuda
    from agent_core.templating.rewrites import compose
    from agent_core.templating.templatize import templatize
    out.mkdir(parents=True, exist_ok=True)
    p = ROOT / "bench/corpus/other/column_sum_f32.cu"
    cf = parse_cuda(p.read_text(), str(p))
    got = compose(cf, "column_sum_kernel", S.find_spec(cf, "column_sum_kernel"), templatize(cf, "column_sum_kernel"))
    twin = next(t for t in got.twins if "cluster_split" in t.origin)
    old = twin.text[twin.text.index("template <int N, typename T> __device__ __forceinline__ kt_pack<T, N> kt_load("):]
    old = old[:old.index("\n}\n") + 2]
    (out / "twin.cu").write_text(twin.text.replace(old, _KT_LOAD))
    hand = ROOT / "gpu/experiments/column_sum_cs3.cu"
    jobs, manifest = [], []
    for b, s, c, u, l in HAND:
        name = f"hand_B{b}_S{s}_C{c}_U{u}_L{l}"
        jobs.append(["nvcc", "-arch=sm_90", "-cubin", f"-DBLOCK={b}", f"-DSPLIT={s}", f"-DCLUSTER={c}",
                     f"-DUNROLL={u}", f"-DLOAD={l}", "-o", str(out / f"{name}.cubin"), str(hand)])
        manifest.append({"name": name, "symbol": "cs", "grid": [-(-COLS // (b * 4)), c], "block": [b, s]})
    for b, o, s, c, ld in TWIN:
        name = f"twin_B{b}_O{o}_S{s}_C{c}_L{ld}"
        jobs.append(["nvcc", "-arch=sm_90", "-cubin", f"-DKT_BLOCK={b}", f"-DKT_OUTS={o}", f"-DKT_SPLIT={s}",
                     f"-DKT_CLUSTER={c}", f"-DKT_LOAD={ld}", "-o", str(out / f"{name}.cubin"), str(out / "twin.cu")])
        manifest.append({"name": name, "symbol": "_Z17column_sum_kernelPKfPfii", "grid": [-(-COLS // (b * o)), c],
                         "block": [b, s]})
    procs = [subprocess.Popen(j, stderr=subprocess.PIPE) for j in jobs]
    for p_, j in zip(procs, jobs):
        if p_.wait():
            raise SystemExit(f"nvcc failed: {' '.join(j)}\n{p_.stderr.read().decode()[-2000:]}")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"{len(manifest)} variants compiled into {out}")


def run(d: Path) -> None:
    import cupy as cp
    import numpy as np
    man = json.loads((d / "manifest.json").read_text())
    x = cp.random.standard_normal(ROWS * COLS, dtype=cp.float32)
    ref = x.reshape(ROWS, COLS).astype(cp.float64).sum(axis=0)
    out = cp.empty(COLS, cp.float32)
    flush = cp.empty(256 * 1024 * 1024 // 4, cp.float32)  # 256 MB written before every launch: L2 (50 MB) cold
    src, dst = cp.random.standard_normal(ROWS * COLS, dtype=cp.float32), cp.empty(ROWS * COLS, cp.float32)
    a, b = cp.cuda.Event(), cp.cuda.Event()

    def once(fn) -> float:
        flush.fill(0)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return cp.cuda.get_elapsed_time(a, b) * 1000

    def copy():
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, cp.cuda.runtime.memcpyDeviceToDevice,
                                    cp.cuda.get_current_stream().ptr)
    fns = {"copy": copy}
    for m in man:
        k = cp.RawModule(path=str(d / f"{m['name']}.cubin")).get_function(m["symbol"])
        args = (x, out, np.int32(ROWS), np.int32(COLS))
        fns[m["name"]] = (lambda k=k, m=m, args=args: k(tuple(m["grid"]), tuple(m["block"]), args))
        out.fill(np.nan)
        fns[m["name"]]()
        cp.cuda.Device().synchronize()
        m["ok"] = bool(cp.allclose(out.astype(cp.float64), ref, rtol=1e-4, atol=1e-2))
    times = {n: [] for n in fns}
    for _ in range(3):
        for fn in fns.values():
            once(fn)  # warm up
    for _ in range(int(os.environ.get("ROUNDS", "40"))):
        for n, fn in fns.items():
            times[n].append(once(fn))
    med = {n: float(np.median(t)) for n, t in times.items()}
    copy_gbps = 2 * src.nbytes / med["copy"] / 1e3
    res = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "copy_us": med["copy"],
           "copy_gbps": copy_gbps, "variants": []}
    print(f"{res['device']}: copy {med['copy']:.1f} us = {copy_gbps:.0f} GB/s (read + written)")
    for m in sorted(man, key=lambda m: med[m["name"]]):
        us = med[m["name"]]
        pct = 100 * x.nbytes / us / 1e3 / copy_gbps
        q = np.percentile(times[m["name"]], [25, 75])
        res["variants"].append({**m, "us": us, "iqr_us": [float(q[0]), float(q[1])], "pct_copy": pct})
        print(f"  {m['name']:<26} {'ok ' if m['ok'] else 'WRONG'} {us:7.1f} us (IQR {q[0]:.1f}-{q[1]:.1f})  "
              f"{pct:5.1f}% of copy")
    Path(os.environ.get("OUT", str(d)), "column_sum_same_harness.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    {"prep": prep, "run": run}[sys.argv[1]](Path(sys.argv[2]))
