"""Why do the vocabulary softmaxes (softmax_long_cluster, STAGE 1) stop at 53-70% of copy bandwidth on the H100?

For each long-row corpus variant: the cluster expert as the 2026-11-26q corpus run tuned it (the recorded template
text, its winning configuration) beside the current template (the division by a temperature as a reciprocal and one
correction step, the second read and the write streaming, relaxed cluster arrives; FAST_MATH 1: exp as ex2.approx
of d * log2(e); the first run of this probe, 2026-11-26r, had the hints and the exp as KT_HINT / KT_EXP defines), each verified against the original on every size set and timed (GpuBackend.evaluate), the best confirmed
interleaved with the original, and ncu counters of one launch on the largest size set (DRAM bytes, L2 hit rate,
instructions, issue activity, stalls). A bandwidth reference for each shape's traffic: a 16-byte vectorized
conversion kernel reading the input type and writing the output type (cupy), timed after an L2 flush.

    python gpu/experiments/long_softmax_probe.py > $OUT/long_softmax_probe.txt
"""
import functools
import gzip
import json
import sqlite3
import sys
import tempfile
import time
import tomllib
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent_core.measure.backend import Problem, Variant  # noqa: E402
from agent_core.measure.compiler import compile_kernel  # noqa: E402
from agent_core.measure.gpu_backend import GpuBackend  # noqa: E402
from agent_core.model import KernelTemplate, macro_name, sha256_text  # noqa: E402
from agent_core.search import tuner  # noqa: E402
from agent_core.source import spec as spec_mod  # noqa: E402
from agent_core.templating import experts  # noqa: E402
from agent_core.templating.experts.library import load_library  # noqa: E402

STORE = ROOT / "gpu" / "results" / "2026-11-26q" / "corpus" / "rows" / "results.sqlite.gz"
RESULTS = ROOT / "gpu" / "results" / "2026-11-26q" / "corpus" / "corpus_all_72.json"
VARIANTS = ["softmax/sampling_probs_scalar_temperature_bf16.cu", "softmax/online_softmax_temperature_f32.cu",
            "softmax/softmax_gridstride_half_to_float.cu"]
METRICS = ["gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum",
           "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct", "sm__inst_executed.sum",
           "smsp__issue_active.avg.pct_of_peak_sustained_active", "sm__warps_active.avg.pct_of_peak_sustained_active",
           "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
           "launch__occupancy_limit_registers", "sm__throughput.avg.pct_of_peak_sustained_elapsed"]


@functools.cache
def _store() -> Path:
    """The recorded store, decompressed once."""
    d = Path(tempfile.mkdtemp())
    (d / "s.sqlite").write_bytes(gzip.decompress(STORE.read_bytes()))
    return d / "s.sqlite"


def recorded(variant: str) -> tuple[str, dict]:
    with sqlite3.connect(_store()) as c:
        (text,) = c.execute("SELECT t.text FROM templates t JOIN sessions s ON s.template_hash = t.template_hash "
                            "WHERE s.path LIKE ? AND s.origin = 'expert:softmax_long_cluster' ORDER BY s.id DESC",
                            (f"%/bench/corpus/{variant}",)).fetchone()
    res = json.loads(RESULTS.read_text())
    params = next(k["params"] for k in res["kernels"] if k["file"].endswith(variant))
    return text, params


def current(prep, kernel: str) -> KernelTemplate:
    lib = {e.name: e for e in load_library()}
    for b in experts.candidates(prep.cf, kernel, prep.spec):
        if b.expert.family != "softmax":
            continue
        lt = experts.long_twin(b, lib)
        ct = experts.cluster_twin(lt, lib) if lt else None
        if ct is not None:
            return experts.bind(ct, prep.cf, prep.spec)
    raise SystemExit(f"{kernel}: no softmax_long_cluster binding")


def reference_bandwidth(prep) -> list[str]:
    """GB/s of a vectorized conversion in -> out of the input and output dtypes, per size set (the traffic the
    softmax moves once: one read, one write), median of 20 launches each after an L2 flush."""
    import cupy as cp
    ins = [a for a in prep.spec.args if a.role == "in"]
    outs = [a for a in prep.spec.args if a.role in ("out", "inout")]
    tmap = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16"}
    ti, to = tmap[ins[0].dtype], tmap[outs[0].dtype]
    src = f"""#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ float f(float v) {{ return v; }} __device__ float f(__half v) {{ return __half2float(v); }}
__device__ float f(__nv_bfloat16 v) {{ return __bfloat162float(v); }}
template <typename T> __device__ T g(float v);
template <> __device__ float g<float>(float v) {{ return v; }}
extern "C" __global__ void conv(const {ti}* __restrict__ x, {to}* __restrict__ y, long long n) {{
  long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
  for (; i + 3 < n; i += (long long)gridDim.x * blockDim.x * 4) {{
#pragma unroll
    for (int j = 0; j < 4; ++j) y[i + j] = g<{to}>(f(x[i + j]));
  }}
  for (; i < n; ++i) y[i] = g<{to}>(f(x[i]));
}}"""
    k = cp.RawKernel(src, "conv", options=("-std=c++17",), backend="nvcc")
    flush = cp.empty(200 * 2**20, dtype=cp.uint8)
    out = []
    for sizes in prep.spec.sizes:
        n = 1
        for v in sizes.values():
            n *= v
        isz = {"float": 4, "__half": 2, "__nv_bfloat16": 2}
        x = cp.zeros(n * isz[ti] // 2, dtype=cp.uint16)
        y = cp.empty(n * isz[to] // 2, dtype=cp.uint16)
        ts = []
        for _ in range(21):
            flush.fill(1)
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            k((132 * 16,), (256,), (x, y, cp.int64(n)))
            b.record()
            b.synchronize()
            ts.append(cp.cuda.get_elapsed_time(a, b) * 1e3)
        us = sorted(ts[1:])[10]
        gb = n * (isz[ti] + isz[to]) / (us * 1e3)
        out.append(f"{sizes}: {us:.1f} us, {gb:.0f} GB/s")
    return out


def main() -> None:
    man = {v["file"]: v for v in tomllib.loads((ROOT / "bench" / "corpus" / "corpus.toml").read_text())["variant"]}
    backend = GpuBackend()
    dev = backend.device()
    bw = dev.copy_bandwidth_gbps or backend.measure_copy_bandwidth()
    print(f"{dev.name}, copy {bw:.0f} GB/s", flush=True)
    for variant in VARIANTS:
        kernel = man[variant]["kernel"]
        path = str(ROOT / "bench" / "corpus" / variant)
        prep = tuner.prepare(path, kernel)
        spec = prep.spec
        nbytes = [spec_mod.bytes_moved(spec, s) for s in spec.sizes]
        big = max(range(len(nbytes)), key=lambda i: nbytes[i])
        old_text, win = recorded(variant)
        cur = current(prep, kernel)
        old = replace(cur, text=old_text)
        print(f"\n## {variant} ({kernel}); sizes {spec.sizes}; winner {win}", flush=True)
        try:
            for line in reference_bandwidth(prep):
                print("  conversion reference:", line, flush=True)
        except Exception as e:  # the reference is a side figure
            print("  conversion reference failed:", str(e)[:300], flush=True)
        ref = compile_kernel(prep.text, prep.kernel.name, arch=dev.arch, include_dirs=[str(Path(path).parent)],
                             source_path=path)
        ref_launches = prep.original_launches(spec)
        base = dict(win)
        configs = [("recorded", old, base)]
        for e in (0, 1):
            configs.append((f"current FAST_MATH={e}", cur, {**base, "FAST_MATH": e}))
        for c, th in ((2, 1024), (4, 1024), (8, 1024), (4, 512), (8, 256)):
            cfg = {**base, "CLUSTER": c, "THREADS": th, "FAST_MATH": 1}
            if cfg != {**base, "FAST_MATH": 1}:
                configs.append((f"current FAST_MATH=1 CLUSTER={c} THREADS={th}", cur, cfg))
        rows = []
        problem = Problem(spec=spec, reference=ref, reference_launches=ref_launches,
                          original_hash=sha256_text(prep.text), template_hash=cur.template_hash,
                          spec_hash=spec.spec_hash)
        orig = backend.start(problem)
        for label, t, cfg in configs:
            try:
                comp = compile_kernel(t.text, t.entry or t.kernel, arch=dev.arch,
                                      defines={macro_name(n): v for n, v in cfg.items()},
                                      include_dirs=[str(Path(path).parent)], source_path=path)
            except Exception as e:
                print(f"  {label}: compile failed: {str(e)[:300]}", flush=True)
                continue
            v = Variant(params=cfg, compiled=comp, launches=tuner._launches(t, spec, cfg))
            ev = backend.evaluate(v)
            if not ev.ok:
                print(f"  {label} {cfg}: {ev.status} {ev.error[:300] if ev.error else ''}", flush=True)
                continue
            us = [tm.median_us for tm in ev.timings]
            pct = [100 * n / (u * 1e3) / bw for n, u in zip(nbytes, us)]
            print(f"  {label} {cfg} regs {comp.resources.registers}: " + ", ".join(
                f"{u:.1f} us ({p:.0f}%) vs original {o.median_us:.1f}" for u, p, o in zip(us, pct, orig)), flush=True)
            rows.append((us[big], label, t, cfg, v))
        rows.sort(key=lambda r: r[0])
        for _, label, t, cfg, v in [r for r in rows if r[1] == "recorded"] + rows[:2]:
            prof = backend.profile(v, METRICS, big)
            m = prof.get("metrics", {})
            keep = {k: m[k] for k in m if any(k.startswith(x.split(".")[0]) for x in METRICS)}
            print(f"  ncu {label} {cfg} on {spec.sizes[big]}: " + json.dumps(
                {k: round(x, 2) for k, x in keep.items()}) + f"; top stalls {prof.get('top_stalls')}"
                  + (f"; error {prof['error']}" if "error" in prof else ""), flush=True)
    backend.close()


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"\n{time.time() - t0:.0f} s")
