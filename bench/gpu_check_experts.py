"""Sanity check of the expert templates on a GPU: each bench kernel against its bound expert.

    python bench/gpu_check_experts.py prep OUTDIR [EXPERT ...]  # here (nvcc): originals + expert configs to cubins
    python bench/gpu_check_experts.py run OUTDIR                # on the GPU machine (cupy + numpy): verify and time

Without EXPERT names each bench kernel is checked against the expert that matched it first; with names, against
every matching expert of those names (e.g. the cluster twins: rms_norm_cluster fused_add_rms_norm_cluster
layer_norm_cluster softmax_cluster).

Verification follows the engine's rules (fresh random inputs, poisoned outputs, every written buffer compared,
every size set incl. the tails); timing is the median of CUDA-event-timed batches with L2 flushed before each.
This is a one-off check of the templates, not the tuner: `kerntune bench` replaces it once the tuner lands.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS_PER_KERNEL = 8


def prep(out: Path, only: list[str] | None = None) -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    from agent_core.templating import experts as X
    from agent_core.source import spec as S
    from agent_core.model import macro_name
    from agent_core.templating.space import check_config
    from test_experts import EXPECTED, bench_case
    out.mkdir(parents=True, exist_ok=True)
    manifest = []
    cases = []
    for bench_name in sorted(EXPECTED):
        cf, k, spec = bench_case(bench_name)
        ms = X.match(cf, k.name, spec)
        for m in ([x for x in ms if x.expert.name in only] if only else ms[:1]):
            cases.append((bench_name if not only else f"{bench_name}.{m.expert.name}", bench_name, cf, k, spec, m))
    for name, bench_name, cf, k, spec, m in cases:
        t = X.bind(m, cf, spec)
        orig = out / f"{name}.orig.cubin"
        subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(orig), str(ROOT / "bench" / f"{bench_name}.cu")],
                       check=True)
        sym = re.search(rb"_Z\d+" + k.name.encode() + rb"[A-Za-z0-9_]*", orig.read_bytes()).group(0).decode()
        (out / f"{name}.kt.cu").write_text(t.text)
        rng = random.Random(0)
        names = list(t.space.params)
        allc = []
        import itertools
        for combo in itertools.product(*(t.space.params[n].values for n in names)):
            cfg = dict(zip(names, combo))
            if check_config(t.space, cfg, spec.sizes) is None:
                allc.append(cfg)
        start = t.space.original_config()
        pick = [start] + rng.sample([c for c in allc if c != start], min(CONFIGS_PER_KERNEL - 1, len(allc) - 1))
        variants = []
        for i, cfg in enumerate(pick):
            cub = out / f"{name}.v{i}.cubin"
            subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(cub),
                            *[f"-D{macro_name(n)}={v}" for n, v in cfg.items()], str(out / f"{name}.kt.cu")], check=True)
            variants.append({"params": cfg, "cubin": cub.name,
                             "launches": [S.launch(t.launch, s, cfg).__dict__ for s in spec.sizes]})
        manifest.append({
            "name": name, "kernel": k.name, "symbol": sym, "cubin": orig.name, "entry": t.entry,
            "expert": m.expert.name, "reason": m.reason,
            "args": [a.__dict__ for a in spec.args], "sizes": spec.sizes,
            "elems": [S.buffer_elems(spec, s) for s in spec.sizes],
            "scalars": [S.scalar_values(spec, s) for s in spec.sizes],
            "bytes": [S.bytes_moved(spec, s) for s in spec.sizes],
            "launches": [S.launch(spec, s, {}).__dict__ for s in spec.sizes],
            "variants": variants})
        print(name, m.expert.name, len(variants), "variants", flush=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


# --------------------------------------------------------------------------------------------- device side
def run(out: Path) -> None:
    import cupy as cp
    import numpy as np

    def bf16_bits(f32):
        b = f32.astype(cp.float32).view(cp.uint32)
        return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(cp.uint16)

    def to_f32(arr, dtype):
        if dtype == "bf16":
            return (arr.astype(cp.uint32) << 16).view(cp.float32)
        return arr.astype(cp.float32) if dtype in ("f16", "f32") else arr.astype(cp.float64)

    NP = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i8": np.int8, "u8": np.uint8, "i32": np.int32,
          "i64": np.int64}
    flush = cp.empty(256 << 20, dtype=cp.uint8)

    def make_input(a, n, rs):
        init = a.get("init", "normal")
        mo = re.match(r"(randint|uniform)\(([-\d.]+),\s*([-\d.]+)\)", init)
        if mo and mo.group(1) == "randint":
            v = rs.randint(int(mo.group(2)), int(mo.group(3)) + 1, n)
        elif mo:
            v = rs.uniform(float(mo.group(2)), float(mo.group(3)), n, dtype=cp.float32)
        else:
            v = rs.standard_normal(n, dtype=cp.float32)
        if a["dtype"] == "bf16":
            return bf16_bits(v)
        return v.astype(NP[a["dtype"]])

    def call(fn, launch, args):
        fn(tuple(launch["grid"]), tuple(launch["block"]), args, shared_mem=launch.get("smem", 0))

    def args_for(m, i, bufs):
        out_args = []
        for a in m["args"]:
            if a["role"] == "scalar":
                v = m["scalars"][i][a["name"]]
                out_args.append(np.float32(v) if a["dtype"] == "f32" else np.int32(v) if a["dtype"] == "i32" else
                                np.int64(v))
            else:
                out_args.append(bufs[a["name"]])
        return out_args

    def run_once(m, i, fn, launch, host):
        bufs = {}
        for a in m["args"]:
            if a["role"] == "scalar":
                continue
            if a["role"] == "out":
                arr = cp.empty(m["elems"][i][a["name"]], dtype=NP[a["dtype"]])
                arr.view(cp.uint8).fill(0xFF)  # poison: NaN for floats
                bufs[a["name"]] = arr
            else:
                bufs[a["name"]] = host[a["name"]].copy()
        call(fn, launch, args_for(m, i, bufs))
        cp.cuda.runtime.deviceSynchronize()
        return bufs

    def timeit(m, i, fn, launch, bufs, reps=10):
        args = args_for(m, i, bufs)
        batch = max(1, min(50, int(2e6 / max(m["bytes"][i], 1))))
        ts = []
        for _ in range(reps):
            flush.fill(1)
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            for _ in range(batch):
                call(fn, launch, args)
            e1.record()
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1000 / batch)
        return float(np.median(ts))

    # device copy bandwidth
    a = cp.empty(1 << 30, dtype=cp.uint8)
    b = cp.empty_like(a)
    cp.copyto(b, a)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record()
    for _ in range(10):
        cp.copyto(b, a)
    e1.record()
    e1.synchronize()
    copy_bw = 2 * (1 << 30) * 10 / (cp.cuda.get_elapsed_time(e0, e1) / 1000) / 1e9
    del a, b
    print(f"device copy bandwidth {copy_bw:.0f} GB/s", flush=True)

    manifest = json.loads((out / "manifest.json").read_text())
    results = []
    for m in manifest:
        ref = cp.RawModule(path=str(out / m["cubin"])).get_function(m["symbol"])
        fns = [cp.RawModule(path=str(out / v["cubin"])).get_function(m["entry"]) for v in m["variants"]]
        for i, sizes in enumerate(m["sizes"]):
            rs = cp.random.RandomState(1234 + i)
            host = {a["name"]: make_input(a, m["elems"][i][a["name"]], rs) for a in m["args"]
                    if a["role"] in ("in", "inout")}
            expect = run_once(m, i, ref, m["launches"][i], host)
            t_orig = timeit(m, i, ref, m["launches"][i], run_once(m, i, ref, m["launches"][i], host))
            row = {"kernel": m["name"], "expert": m["expert"], "sizes": sizes, "orig_us": t_orig, "variants": []}
            for v, fn in zip(m["variants"], fns):
                got = run_once(m, i, fn, v["launches"][i], host)
                bad = []
                for a in m["args"]:
                    if a["role"] not in ("out", "inout"):
                        continue
                    x, y = to_f32(expect[a["name"]], a["dtype"]), to_f32(got[a["name"]], a["dtype"])
                    tol = {"f32": 1e-5, "f16": 1e-2, "bf16": 1e-2}.get(a["dtype"], 0)
                    close = cp.isclose(y, x, rtol=tol, atol=tol)
                    nbad = int((~close).sum())
                    if nbad:
                        first = int(cp.argmax(~close))
                        bad.append(f"{a['name']}: {nbad} bad, first at {first}: {float(y[first])} vs {float(x[first])}")
                t = timeit(m, i, fn, v["launches"][i], got) if not bad else None
                del got
                row["variants"].append({"params": v["params"], "us": t, "errors": bad})
            ok = [v for v in row["variants"] if v["us"]]
            best = min(ok, key=lambda v: v["us"]) if ok else None
            row["best_us"] = best["us"] if best else None
            row["best_params"] = best["params"] if best else None
            row["speedup"] = t_orig / best["us"] if best else None
            row["gbps"] = m["bytes"][i] / (best["us"] * 1e-6) / 1e9 if best else None
            row["pct_copy"] = 100 * row["gbps"] / copy_bw if best else None
            row["failed"] = [v for v in row["variants"] if v["errors"]]
            results.append(row)
            print(f"{m['name']:28s} {json.dumps(sizes):60s} orig {t_orig:9.1f} us  best "
                  + (f"{row['best_us']:9.1f} us  x{row['speedup']:.2f}  {row['gbps']:.0f} GB/s ({row['pct_copy']:.0f}%)"
                     if best else "none") + f"  failed {len(row['failed'])}/{len(row['variants'])}"
                  + (f"  e.g. {row['failed'][0]['params']} {row['failed'][0]['errors']}" if row["failed"] else ""),
                  flush=True)
    import math
    sp = [r["speedup"] for r in results if r["speedup"]]
    geo = math.exp(sum(map(math.log, sp)) / len(sp)) if sp else None
    print(f"geometric-mean speedup of the best checked variant: {geo:.2f}x over {len(sp)} (kernel, size) pairs")
    import os
    dest = Path(os.environ.get("OUT", out))
    (dest / "gpu_check_results.json").write_text(json.dumps({"copy_bw_gbps": copy_bw, "geomean": geo,
                                                             "results": results}, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "prep":
        prep(Path(sys.argv[2]), sys.argv[3:] or None)
    else:
        run(Path(sys.argv[2]))
