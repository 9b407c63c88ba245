"""GPU check of the semantic rewrite templates (agent_core/templating/rewrites) against the kernels they rewrite.

    python bench/gpu_check_rewrites.py prep OUTDIR [FILE[:KERNEL] ...]  # here (nvcc): originals + configs to cubins
    python bench/gpu_check_rewrites.py run OUTDIR                       # on the GPU machine (cupy + numpy)

``run`` checks each kernel in a process of its own: a fault ends that kernel's check only, reported with what was
running (the original kernel, or which configuration on which check).

Without files, the kernels of tests/data/cu/rewrites/ are checked. ``AXES='{"OUTS": [1, 4], ...}'`` makes ``prep`` check
every combination of those values instead (a sweep; the other parameters at their defaults). ``prep`` composes each kernel's rewrite template,
picks configurations (the template's default, the widest vectors at several block sizes with and without the
row cache, work per thread and fast math, a few random ones), compiles the original and every configuration for
sm_90, and writes a manifest; it prints which kernels get a rewrite, which rewrites, and why the others do not.

``run`` verifies every configuration against the original kernel, on fresh random inputs with the outputs poisoned,
every written buffer compared at the spec's tolerances, on: every size set of the spec; every size set again with
every buffer misaligned by one element; an odd size set (the spec's smallest with every size + 1) aligned and
misaligned. It then times (CUDA events, L2 flushed, median of batches) the original, the default configuration and
every verified configuration on the spec's size sets, and prints the default and the best three against the
original, with achieved bandwidth as % of the device's copy bandwidth (marking size sets that move >= 64 MB).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RANDOM_CONFIGS = 2
MAX_CONFIGS = 8


# --------------------------------------------------------------------------------------------- here
def _symbol(cubin: Path, kernel: str) -> str:
    """The entry symbol of ``kernel`` in a cubin (mangled, or plain for extern "C")."""
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if Path(tool).exists():
        listing = subprocess.run([tool, "-symbols", str(cubin)], capture_output=True, text=True).stdout
        for n in re.findall(r"STT_FUNC\s+STB_GLOBAL\s+\S+\s+(\S+)", listing):
            if n == kernel or re.match(rf"_Z\d+{re.escape(kernel)}\w*$", n) or \
                    re.match(rf"_Z\d+{re.escape(kernel)}I", n):
                return n
    data = cubin.read_bytes()
    m = re.search(rb"_Z\w*" + kernel.encode() + rb"[A-Za-z0-9_]*", data)
    if m:
        return m.group(0).decode()
    if kernel.encode() in data:
        return kernel
    raise RuntimeError(f"no symbol for {kernel} in {cubin}")


def _configs(t, sizes) -> list[dict]:
    """The default, then targeted configurations (widest vector per block size, with and without the row cache,
    work per thread, fast math, split loops, outputs per thread), then a few random ones; all satisfying the space's constraints."""
    from agent_core.templating.space import check_config
    sp = t.space
    base = sp.original_config()
    block = next((p for p in sp.params.values() if p.kind == "block_size"), None)
    axes: dict[str, list[int]] = {}
    if block is not None:
        axes[block.name] = sorted({v for v in (128, 256, 512, 1024) if v in block.values} | {block.original})
    if "VEC" in sp.params:
        axes["VEC"] = [max(sp.params["VEC"].values)]
    if "ITEMS" in sp.params:
        axes["ITEMS"] = [1, 4]
    if "CACHE_ROW" in sp.params:
        axes["CACHE_ROW"] = [0, 4, 16]
    if "FAST_MATH" in sp.params:
        axes["FAST_MATH"] = [0, 1]
    if "SPLIT" in sp.params:
        axes["SPLIT"] = [1, 4, 32]
    if "CLUSTER" in sp.params:
        axes["CLUSTER"] = [2, 8]
    if "OUTS" in sp.params:
        axes["OUTS"] = [1, max(sp.params["OUTS"].values)]
    if "LOAD_HINT" in sp.params:
        axes["LOAD_HINT"] = [0, 1]
    sweep = json.loads(os.environ["AXES"]) if os.environ.get("AXES") else None  # a sweep asked for: every combination
    if sweep:
        axes = {n: vals for n, vals in sweep.items() if n in sp.params}
    names = list(axes)
    targeted = []
    for combo in itertools.product(*(axes[n] for n in names)):
        cfg = {**base, **dict(zip(names, combo))}
        if check_config(sp, cfg, sizes) is None and cfg not in targeted and cfg != base:
            targeted.append(cfg)
    rng = random.Random(0)
    if sweep:
        return [base] + targeted
    if len(targeted) > MAX_CONFIGS:
        targeted = rng.sample(targeted, MAX_CONFIGS)
    allnames = list(sp.params)
    everything = [dict(zip(allnames, c)) for c in itertools.product(*(sp.params[n].values for n in allnames))]
    if len(everything) > 200000:
        everything = rng.sample(everything, 200000)
    valid = [c for c in everything if check_config(sp, c, sizes) is None and c != base and c not in targeted]
    return [base] + targeted + rng.sample(valid, min(RANDOM_CONFIGS, len(valid)))


def _check_sets(spec) -> list[dict]:
    """(label, sizes, misaligned) of every check: the spec's size sets, each misaligned, an odd set both ways."""
    out = [{"label": f"spec {i + 1}", "sizes": s, "misaligned": False, "timed": True} for i, s in enumerate(spec.sizes)]
    out += [{"label": f"spec {i + 1} misaligned", "sizes": s, "misaligned": True, "timed": False}
            for i, s in enumerate(spec.sizes)]
    smallest = min(spec.sizes, key=lambda s: sum(s.values()))
    odd = {k: v + 1 if v % 2 == 0 else v + 2 for k, v in smallest.items()}  # every size odd: no vector divides it
    out += [{"label": "odd", "sizes": odd, "misaligned": False, "timed": False},
            {"label": "odd misaligned", "sizes": odd, "misaligned": True, "timed": False}]
    return out


def prep(out: Path, targets: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    from agent_core.model import KerntuneError, macro_name
    from agent_core.source import spec as S
    from agent_core.source.cuda_parse import parse_cuda
    from agent_core.templating.rewrites import compose
    from agent_core.templating.rewrites.compose import TWINS
    from agent_core.templating.templatize import templatize

    out.mkdir(parents=True, exist_ok=True)
    if not targets:
        targets = sorted(str(p) for p in (ROOT / "tests" / "data" / "cu" / "rewrites").glob("*.cu"))
    manifest, summary = [], []
    jobs = []
    for target in targets:
        path, _, only = target.partition(":")
        text = Path(path).read_text()
        cf = parse_cuda(text, path)
        for k in cf.kernels:
            if only and k.name != only:
                continue
            name = f"{Path(path).stem}.{k.name}"
            try:
                spec = S.find_spec(cf, k.name)
            except KerntuneError as e:
                summary.append((name, None, f"spec does not parse: {e}"))
                continue
            if spec is None:
                summary.append((name, None, "no tuning spec"))
                continue
            try:
                structural = templatize(cf, k.name)
            except KerntuneError:
                structural = None
            try:
                got = compose(cf, k.name, spec, structural)
            except KerntuneError as e:
                summary.append((name, None, f"compose failed: {e}"))
                continue
            why_not = "; ".join(f"{n}: {w}" for n, w in got.report if w is not None)
            summary.append((name, got.applied, why_not))
            if got.template is None:
                continue
            for t in [got.template] + got.twins:  # a twin (cluster_split) is checked as a kernel of its own
                twin = [n for n in t.origin.split(":", 1)[1].split("+") if n in {w.name for w in TWINS.values()}]
                tname = name if t is got.template else f"{name}.{twin[0]}"
                if t is not got.template:
                    summary.append((tname, t.origin.split(":", 1)[1].split("+"), ""))
                manifest.append(_prep_template(out, t, tname, k.name, text, spec, structural, jobs))
    with ThreadPoolExecutor(max_workers=int(os.environ.get("JOBS", str(os.cpu_count() or 2)))) as ex:
        for r in ex.map(lambda cmd: subprocess.run(cmd, capture_output=True, text=True), jobs):
            if r.returncode:
                raise RuntimeError(f"nvcc failed: {' '.join(r.args)}\n{r.stderr[-2000:]}")
    for m in manifest:
        m["symbol"] = _symbol(out / f"{m['name']}.orig.cubin", m["kernel"])
        m["cubin"] = f"{m['name']}.orig.cubin"
        for v in m["variants"]:
            v["symbol"] = _symbol(out / v["cubin"], m["kernel"])
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    got = [s for s in summary if s[1]]
    print(f"{len(got)} of {len(summary)} kernels get a rewrite template "
          f"({sum(len(m['variants']) for m in manifest)} configurations compiled into {out})")
    for name, applied, why in summary:
        print(f"  {name}: " + (f"rewrite:{'+'.join(applied)}" if applied else "no rewrite"))
        if why:
            print(f"      not applied: {why}")


def _prep_template(out: Path, t, tname: str, kernel: str, text: str, spec, structural, jobs: list) -> dict:
    """One template's entry of the manifest: the original and the template written, their compile jobs queued."""
    from agent_core.model import macro_name
    from agent_core.source import spec as S
    orig_params = structural.space.original_config() if structural else {}
    (out / f"{tname}.orig.cu").write_text(text)
    (out / f"{tname}.kt.cu").write_text(t.text)
    checks = _check_sets(spec)
    variants = []
    for i, cfg in enumerate(_configs(t, spec.sizes)):
        variants.append({"params": cfg, "cubin": f"{tname}.v{i}.cubin",
                         "launches": [S.launch(t.launch or spec, c["sizes"], {**orig_params, **cfg}).__dict__
                                      for c in checks]})
        jobs.append(["nvcc", "-arch=sm_90", "-cubin", *os.environ.get("NVCC_FLAGS", "").split(),
                     "-o", str(out / variants[-1]["cubin"]),
                     *[f"-D{macro_name(n)}={v}" for n, v in cfg.items()], str(out / f"{tname}.kt.cu")])
    jobs.append(["nvcc", "-arch=sm_90", "-cubin", "-o", str(out / f"{tname}.orig.cubin"),
                 str(out / f"{tname}.orig.cu")])
    args = [a.__dict__ for a in spec.args]
    return {
        "name": tname, "kernel": kernel, "origin": t.origin, "args": args, "checks": checks,
        "elems": [S.buffer_elems(spec, c["sizes"]) for c in checks],
        "scalars": [S.scalar_values(spec, c["sizes"]) for c in checks],
        "bytes": [S.bytes_moved(spec, c["sizes"]) for c in checks],
        "tolerances": {a.name: S.tolerances(spec, a.dtype) for a in spec.args if a.role in ("out", "inout")},
        "launches": [S.launch(spec, c["sizes"], orig_params).__dict__ for c in checks],
        "variants": variants}


# --------------------------------------------------------------------------------------------- device side
def run(out: Path, only: list[str] | None = None, progress: Path | None = None) -> None:
    """Check the manifest's kernels (``only``: those names) in this process. Before each launch a line saying
    what runs goes to ``progress``, so the parent can name what killed a process that a fault took down."""
    import math

    import cupy as cp
    import numpy as np

    NP = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "f64": np.float64, "i8": np.int8, "u8": np.uint8,
          "i16": np.int16, "i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64}
    SCALAR = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "u32": np.uint32, "i64": np.int64,
              "u64": np.uint64, "i16": np.int16, "i8": np.int8, "u8": np.uint8}

    def bf16_bits(f32):
        b = f32.astype(cp.float32).view(cp.uint32)
        return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(cp.uint16)

    def as_f64(arr, dtype):
        if dtype == "bf16":
            return (arr.astype(cp.uint32) << 16).view(cp.float32).astype(cp.float64)
        return arr.astype(cp.float64)

    def make_input(a, n, rs):
        init = a.get("init", "normal")
        mo = re.match(r"(randint|uniform)\(([-\d.e]+),\s*([-\d.e]+)\)", init)
        if init == "ones":
            v = cp.ones(n, dtype=cp.float32)
        elif init == "zeros":
            v = cp.zeros(n, dtype=cp.float32)
        elif mo and mo.group(1) == "randint":
            v = rs.randint(int(float(mo.group(2))), int(float(mo.group(3))) + 1, n)
        elif mo:
            v = rs.uniform(float(mo.group(2)), float(mo.group(3)), n, dtype=cp.float32)
        else:
            v = rs.standard_normal(n, dtype=cp.float32)
        return bf16_bits(v) if a["dtype"] == "bf16" else v.astype(NP[a["dtype"]])

    def buffers(m, i, host):
        """Fresh buffers for check i: inputs copied from ``host``, outputs poisoned (0xFF: NaN for floats); with
        ``misaligned``, each one element past an aligned allocation."""
        shift = 1 if m["checks"][i]["misaligned"] else 0
        bufs, keep = {}, []
        for a in m["args"]:
            if a["role"] == "scalar":
                continue
            n = m["elems"][i][a["name"]]
            whole = cp.empty(n + shift, dtype=NP[a["dtype"]])
            whole.view(cp.uint8).fill(0xFF)
            keep.append(whole)
            view = whole[shift:]
            if a["role"] in ("in", "inout"):
                view[...] = host[a["name"]]
            bufs[a["name"]] = view
        return bufs, keep

    def args_for(m, i, bufs):
        out_args = []
        for a in m["args"]:
            if a["role"] == "scalar":
                out_args.append(SCALAR[a["dtype"]](m["scalars"][i][a["name"]]))
            else:
                out_args.append(bufs[a["name"]])
        return out_args

    def launch(fn, lc, args):
        fn(tuple(lc["grid"]), tuple(lc["block"]), args, shared_mem=lc.get("smem", 0))

    flush = cp.empty(256 << 20, dtype=cp.uint8)

    def timeit(m, i, fn, lc, reps=15):
        host = inputs(m, i)
        bufs, _keep = buffers(m, i, host)
        args = args_for(m, i, bufs)
        batch = max(1, min(50, int(4e6 / max(m["bytes"][i], 1))))
        launch(fn, lc, args)
        ts = []
        for _ in range(reps):
            flush.fill(1)
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            for _ in range(batch):
                launch(fn, lc, args)
            e1.record()
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1000 / batch)
        return float(np.median(ts))

    cache: dict = {}

    def inputs(m, i):
        key = (m["name"], i)
        if key not in cache:
            cache.clear()
            rs = cp.random.RandomState(1234 + i)
            cache[key] = {a["name"]: make_input(a, m["elems"][i][a["name"]], rs) for a in m["args"]
                          if a["role"] in ("in", "inout")}
        return cache[key]

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
    print(f"device {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}: copy bandwidth {copy_bw:.0f} GB/s",
          flush=True)

    manifest = [m for m in json.loads((out / "manifest.json").read_text()) if only is None or m["name"] in only]
    results = []

    def running(what: str) -> None:
        if progress is not None:
            with open(progress, "a") as f:
                f.write(what + "\n")
    for m in manifest:
        ref = cp.RawModule(path=str(out / m["cubin"])).get_function(m["symbol"])
        fns = [cp.RawModule(path=str(out / v["cubin"])).get_function(v["symbol"]) for v in m["variants"]]
        failures: list[str] = []
        verified = [True] * len(fns)
        for i, check in enumerate(m["checks"]):
            host = inputs(m, i)
            bufs, keep = buffers(m, i, host)
            running(f"the original kernel on {check['label']} {check['sizes']}")
            launch(ref, m["launches"][i], args_for(m, i, bufs))
            cp.cuda.runtime.deviceSynchronize()
            expect = {k: v.copy() for k, v in bufs.items()}
            del bufs, keep
            for j, (v, fn) in enumerate(zip(m["variants"], fns)):
                bufs, keep = buffers(m, i, host)
                running(f"{v['params']} on {check['label']} {check['sizes']}")
                try:
                    launch(fn, v["launches"][i], args_for(m, i, bufs))
                    cp.cuda.runtime.deviceSynchronize()
                except Exception as e:  # a launch error: this configuration fails, the others go on
                    verified[j] = False
                    failures.append(f"{v['params']} on {check['label']} {check['sizes']}: {e}")
                    continue
                for arg in m["args"]:
                    if arg["role"] not in ("out", "inout"):
                        continue
                    rtol, atol = m["tolerances"][arg["name"]]
                    x, y = as_f64(expect[arg["name"]], arg["dtype"]), as_f64(bufs[arg["name"]], arg["dtype"])
                    close = cp.isclose(y, x, rtol=rtol, atol=atol, equal_nan=True)
                    nbad = int((~close).sum())
                    if nbad:
                        verified[j] = False
                        first = int(cp.argmax(~close))
                        failures.append(f"{v['params']} on {check['label']} {check['sizes']}: {arg['name']} {nbad} "
                                        f"wrong, first at {first}: {float(y[first])} vs {float(x[first])}")
                del bufs, keep
        ok = sum(verified)
        # FAST_MATH=1 trades accuracy for speed: outside a tight tolerance it is expected to fail (the tuner drops
        # such variants); any other failure is a wrong rewrite
        wrong = [j for j, v in enumerate(m["variants"]) if not verified[j] and not v["params"].get("FAST_MATH")]
        fast = [j for j, v in enumerate(m["variants"]) if not verified[j] and v["params"].get("FAST_MATH")]
        print(f"\n{m['name']} ({m['origin']}): {ok}/{len(fns)} configurations verified on "
              f"{len(m['checks'])} checks (spec sizes, misaligned by one element, odd sizes); wrong: {len(wrong)}, "
              f"FAST_MATH=1 outside the spec's tolerance: {len(fast)}", flush=True)
        for f in failures[:6]:
            what = "over tolerance (fast math)" if "'FAST_MATH': 1" in f else "FAILED"
            print(f"  {what} {f}")
        row = {"name": m["name"], "origin": m["origin"], "verified": ok, "configs": len(fns), "failures": failures,
               "wrong": [m["variants"][j]["params"] for j in wrong], "sizes": []}
        for i, check in enumerate(m["checks"]):
            if not check["timed"]:
                continue
            t_orig = timeit(m, i, ref, m["launches"][i])
            times = [(timeit(m, i, fn, v["launches"][i]) if verified[j] else None, v["params"])
                     for j, (v, fn) in enumerate(zip(m["variants"], fns))]
            ranked = sorted((t for t in times if t[0] is not None), key=lambda t: t[0])
            gb = m["bytes"][i] / 1e9
            pct = lambda us: 100 * gb / (us * 1e-6) / copy_bw  # noqa: E731
            big = " (>= 64 MB)" if m["bytes"][i] >= 64 << 20 else ""
            print(f"  {json.dumps(check['sizes'])}{big}: original {t_orig:.1f} us ({pct(t_orig):.0f}% of copy)")
            entry = {"sizes": check["sizes"], "bytes": m["bytes"][i], "orig_us": t_orig, "orig_pct": pct(t_orig),
                     "default": None, "best": []}
            if times[0][0] is not None:
                print(f"    default {times[0][0]:.1f} us x{t_orig / times[0][0]:.2f} ({pct(times[0][0]):.0f}%)")
                entry["default"] = {"us": times[0][0], "pct": pct(times[0][0]), "params": times[0][1]}
            for us, params in ranked[:3]:
                print(f"    best    {us:.1f} us x{t_orig / us:.2f} ({pct(us):.0f}%)  {params}")
                entry["best"].append({"us": us, "pct": pct(us), "params": params})
            entry["all"] = [{"us": us, "params": params} for us, params in ranked]
            row["sizes"].append(entry)
        results.append(row)
        if progress is not None:  # one row per kernel, for the parent to gather
            with open(progress.with_suffix(".rows"), "a") as f:
                f.write(json.dumps(row) + "\n")
        else:  # written as each kernel finishes: a run cut short keeps what it measured
            (Path(os.environ.get("OUT", out)) / "gpu_check_rewrites.json").write_text(
                json.dumps({"copy_bw_gbps": copy_bw, "results": results, "complete": False}, indent=1))
    if progress is not None:
        return
    _summary(out, copy_bw, results)


def _summary(out: Path, copy_bw: float, results: list[dict]) -> None:
    import math
    sp = [s["orig_us"] / s["best"][0]["us"] for r in results for s in r["sizes"] if s["best"]]
    geo = math.exp(sum(map(math.log, sp)) / len(sp)) if sp else float("nan")
    bad = [r["name"] for r in results if r["wrong"]]
    died = [f"{r['name']} (running {r['died_running']})" for r in results if r.get("died_running")]
    print(f"\n{len(results)} kernels; geometric-mean speedup of the best verified configuration {geo:.2f}x over "
          f"{len(sp)} (kernel, size) pairs; kernels with a wrong configuration (FAST_MATH=0 failing): {bad or 'none'}; "
          f"check processes that died: {died or 'none'}")
    dest = Path(os.environ.get("OUT", out))
    (dest / "gpu_check_rewrites.json").write_text(json.dumps({"copy_bw_gbps": copy_bw, "results": results, "complete": True}, indent=1))


def run_isolated(out: Path) -> None:
    """Each kernel checked in a process of its own: a fault (an illegal or misaligned address) makes the CUDA
    context unusable, so it ends that process only. The kernel is reported with what was running when it died
    (the original kernel, or which configuration on which check), and the next kernel goes on."""
    import tempfile
    manifest = json.loads((out / "manifest.json").read_text())
    results, copy_bw = [], float("nan")
    for m in manifest:
        with tempfile.TemporaryDirectory() as tmp:
            progress = Path(tmp) / "progress"
            proc = subprocess.run([sys.executable, __file__, "run-one", str(out), m["name"], str(progress)],
                                  capture_output=True, text=True)
            for line in proc.stdout.splitlines():
                if line.startswith("device "):
                    copy_bw = float(line.split("copy bandwidth ")[1].split()[0])
                    if not results:
                        print(line, flush=True)
                else:
                    print(line, flush=True)
            rows = progress.with_suffix(".rows")
            if proc.returncode == 0 and rows.exists():
                results += [json.loads(x) for x in rows.read_text().splitlines()]
                continue
            last = progress.read_text().splitlines()[-1] if progress.exists() else "(nothing launched yet)"
            err = [x for x in proc.stderr.splitlines() if "Error" in x]
            print(f"\n{m['name']} ({m['origin']}): the check process died (exit {proc.returncode}) while running "
                  f"{last}: {err[0].strip() if err else proc.stderr[-300:]}", flush=True)
            results.append({"name": m["name"], "origin": m["origin"], "verified": None, "configs": len(m["variants"]),
                            "failures": [f"process died running {last}"], "wrong": [], "sizes": [],
                            "died_running": last})
    _summary(out, copy_bw, results)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("prep", "run", "run-one"):
        sys.exit(__doc__)
    if sys.argv[1] == "prep":
        prep(Path(sys.argv[2]), sys.argv[3:])
    elif sys.argv[1] == "run-one":
        run(Path(sys.argv[2]), [sys.argv[3]], Path(sys.argv[4]))
    else:
        run_isolated(Path(sys.argv[2]))
