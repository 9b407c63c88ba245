"""The column sum's rewrite (outputs_per_thread + cluster_split, as composed from bench/corpus/other/column_sum_f32.cu)
and the hand-written float4 cluster split of 2026-11-24f (gpu/results/2026-11-24f/column_sum_sweep2/cs2.cu), timed in
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
HAND = [(64, 8, 8, 4, 1), (64, 8, 8, 4, 0), (32, 8, 8, 4, 1), (64, 16, 4, 8, 1), (32, 16, 4, 8, 1)]  # B S C U L
TWIN = [(32, 2, 16, 4), (32, 2, 8, 8), (32, 4, 8, 8), (64, 4, 8, 8), (64, 2, 8, 8), (64, 4, 16, 4)]  # B OUTS S C


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
    (out / "twin.cu").write_text(twin.text)
    hand = ROOT / "gpu/results/2026-11-24f/column_sum_sweep2/cs2.cu"
    jobs, manifest = [], []
    for b, s, c, u, l in HAND:
        name = f"hand_B{b}_S{s}_C{c}_U{u}_L{l}"
        jobs.append(["nvcc", "-arch=sm_90", "-cubin", f"-DBLOCK={b}", f"-DSPLIT={s}", f"-DCLUSTER={c}",
                     f"-DUNROLL={u}", f"-DLOAD={l}", "-o", str(out / f"{name}.cubin"), str(hand)])
        manifest.append({"name": name, "symbol": "cs", "grid": [-(-COLS // (b * 4)), c], "block": [b, s]})
    for b, o, s, c in TWIN:
        name = f"twin_B{b}_O{o}_S{s}_C{c}"
        jobs.append(["nvcc", "-arch=sm_90", "-cubin", f"-DKT_BLOCK={b}", f"-DKT_OUTS={o}", f"-DKT_SPLIT={s}",
                     f"-DKT_CLUSTER={c}", "-o", str(out / f"{name}.cubin"), str(out / "twin.cu")])
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
