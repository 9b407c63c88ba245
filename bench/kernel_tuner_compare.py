"""kerntune and Kernel Tuner side by side, on the GPU, in one run: the same kernel, the same parameter space, the
same verification against the original's outputs.

For each kernel (``--kernel FILE:KERNEL``, repeatable; default: ``examples/row_sum.cu``'s ``row_sum``), kerntune's
structural template (the user's file with every tunable as a ``KT_<PARAM>`` macro) is also a Kernel Tuner
kernel: Kernel Tuner passes tunable parameters as ``#define``s, so its parameters are named ``KT_<PARAM>`` and the
template's header defaults step aside. A C++ template kernel (``examples/scale_rows.cu``) goes to Kernel Tuner by
its templated name (``scale_rows<KT_VEC>``), which Kernel Tuner wraps in an ``extern "C"`` kernel itself. Kernel
Tuner is used as its documentation says: ``tune_kernel`` with its own timing (``iterations=7``, the mean), its
strategies (``brute_force``, ``random_sample``, ``genetic_algorithm``, ``bayes_opt``; a budget
through ``strategy_options={"max_fevals": B}``), the space's constraints as its restriction (the same
function kerntune checks), and ``answer`` + ``verify`` holding the original kernel's outputs (run once per size
set with ``run_kernel`` at the original launch) with the spec's tolerances. Kernel Tuner tunes one problem size
per call, so it runs once per size set of the spec and a configuration counts as evaluated when it has been
evaluated on every size set; kerntune's ``tune`` evaluates a configuration on all of them at once.

Printed per kernel, tool and strategy: evaluations (configurations over all size sets) per minute, the time to
come within 5% of that run's own best, and the best configuration; then every run's best configuration timed
again by one method (kerntune's interleaved confirmation against the original, every size set), so that "best
found" is compared on the same clock. Per kerntune run, one line says where its wall time went (the phases of
its timeline, agent_core.measure.timeline; also in the JSON). At the end: evaluations per minute of kerntune's
exhaustive run over Kernel Tuner's brute force (the whole space, the same configurations) per kernel and over
all kernels, and the notes on where the comparison is not like for like.

Each kerntune run starts a GPU worker of its own, writes to a results store of its own (nothing reused from an
earlier run) and compiles into a compile cache of its own (Kernel Tuner 1.5 compiles with pycuda's cache off,
so neither tool reuses a compilation). What an installation pays once (the worker's helper kernels compiled,
the device's copy bandwidth measured) is paid before the first timed run, and reported as setup.

    python bench/kernel_tuner_compare.py [--kernel FILE:KERNEL ...] [--budget 20] [--kt-strategies ...]
        [--kerntune-strategies ...] [--json OUT] [--store DIR] [--dry-run]
    e.g. --kernel examples/row_sum.cu:row_sum --kernel examples/scale_rows.cu:scale_rows  (30 and 160 configurations)

``--dry-run`` (any machine with nvcc): builds the spaces, the Kernel Tuner sources and arguments, compiles the
Kernel Tuner sources of the original configuration with nvcc (a template kernel: Kernel Tuner's own wrapper of
it), and stops before anything needs a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import random
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from agent_core import expr  # noqa: E402
from agent_core.measure.timeline import render_tallies  # noqa: E402
from agent_core.model import KerntuneError  # noqa: E402
from agent_core.source import spec as spec_mod  # noqa: E402
from agent_core.source.cuda_parse import parse_cuda  # noqa: E402
from agent_core.templating.space import check_config, valid_configs  # noqa: E402

KT_STRATEGIES = ("brute_force", "random_sample", "genetic_algorithm", "bayes_opt")
KERNTUNE_STRATEGIES = ("exhaustive", "auto")
WITHIN = 0.05
NOT_LIKE_FOR_LIKE = [
    "timing: Kernel Tuner reports the mean of 7 single launches (iterations=7) with no L2 flush between them and "
    "host launch latency inside short kernels; kerntune the median of 10-100 repetitions, L2 flushed before each, "
    "short kernels timed as a batch of back-to-back launches. Each tool ranks by its own clock; the re-timed best "
    "(one method, interleaved with the original) is the figure to compare.",
    "verification: both compare every output buffer with the original's outputs at the spec's tolerances; "
    "Kernel Tuner on one set of inputs per size set, reused for every configuration, with outputs zeroed, on the "
    "host (outputs copied back, numpy allclose); kerntune on the GPU, on fresh random inputs for every "
    "configuration and size set (the original re-run on them for its outputs), outputs poisoned (NaN / 0xFF) "
    "before each run.",
    "problem sizes: Kernel Tuner tunes one problem size per call, so it is run once per size set (its time and "
    "evaluations summed, its best per size set reported and its best over all size sets taken as the "
    "configuration with the lowest geometric mean of time / the original configuration's time, where both size "
    "sets have it); kerntune evaluates every configuration on all size sets in one pass and ranks by that "
    "geometric mean.",
    "compiling: Kernel Tuner compiles one configuration at a time, the kernel alone, with the backend its "
    "lang='CUDA' picks (the first installed of cuda-python, CuPy and PyCUDA: NVRTC in process for the first two, "
    "nvcc for PyCUDA; printed beside its breakdown; on the GPU machine cuda-python's CudaFunctions); no compile is cached. kerntune "
    "compiles the user's whole file per configuration, by NVRTC in a pool of processes where the file's device "
    "code can be taken apart from its host code (agent_core.measure.nvrtc), else by nvcc, a batch in parallel (one "
    "compile per CPU core), the next batch while the GPU measures this one (exhaustive, random; an adaptive "
    "strategy such as auto waits for its batch's compilation); each kerntune run here starts with an empty "
    "compile cache.",
    "fixed costs per run: kerntune's wall is its whole `tune` call: a GPU worker started (a new process and CUDA "
    "context; with --worker warm the worker is up before the clock, as in an editor session, and the NVRTC "
    "compile pool is the one the runs before it started), the original compiled and timed, the search, the best confirmed against the original (5 "
    "interleaved rounds per size set); its one-time costs per installation (the worker's helper kernels compiled, "
    "the copy bandwidth measured) are paid before the timed runs. Kernel Tuner's wall is its tune_kernel calls "
    "(one per size set, each creating its CUDA context); the original's outputs (run_kernel, once per size set) "
    "are computed before its clock starts.",
    "stores: each kerntune run writes to a fresh results store, so no evaluation is reused from an earlier run.",
    "budgets: a Kernel Tuner budget (max_fevals) counts unique configurations including failed ones, per size set; "
    "kerntune's counts configurations measured (failed ones included, pruned ones not) over all size sets.",
    "kerntune's search here: one `tune` session (no optimize loop, no expert templates); the early stop is off so "
    "both tools spend the same budget.",
]


# --------------------------------------------------------------------------------------------- the kernel
@dataclass
class Case:
    """One kernel ready for both tools."""

    path: str
    kernel: str
    prep: object  # tuner.Prepared
    kt_source: str  # the template as Kernel Tuner compiles it
    original_source: str  # the user's file as Kernel Tuner compiles it (the reference)
    tune_params: dict  # KT_<PARAM> -> values
    block_names: list[str]
    original_block: list[int]
    grid: list[str]  # the spec's grid expressions (size and parameter names)
    restriction: object  # params dict -> bool: the space's constraints on every size set
    n_valid: int
    kt_name: str = ""  # the kernel's name for Kernel Tuner: a template kernel's with its arguments (KT wraps it)
    original_name: str = ""  # the same for the original (the template arguments of the user's launch)


def kt_source(text: str, kernel: str) -> str:
    """``text`` cut after the definition of ``kernel``, its ``#include``s dropped and the kernel given C linkage:
    what pycuda's SourceModule (Kernel Tuner's CUDA backend) compiles and finds by name. A template kernel keeps
    its C++ linkage: Kernel Tuner instantiates it in an ``extern "C"`` wrapper of its own (``kt_names``)."""
    cf = parse_cuda(text)
    k = cf.kernel(kernel)
    lines = text.splitlines()
    head = "\n".join(ln if not ln.lstrip().startswith("#include") else "// " + ln for ln in lines[:k.span.line])
    body = "\n".join(lines[k.span.line:k.span.end_line + 1])
    if "__global__" not in body:
        raise KerntuneError(f"no __global__ in the definition of {kernel}")
    return head + ("\n" if k.template_params else "\nextern \"C\" ") + body + "\n"


def kt_names(prep, kernel: str) -> tuple[str, str]:
    """(the template's, the original's) kernel name for Kernel Tuner: ``kernel`` itself, or for a template kernel
    ``kernel<KT_P, ...>`` and ``kernel<v, ...>``, every template argument a parameter of the space (its
    ``#define`` in the template; its original value for the original)."""
    tps = prep.kernel.template_params
    if not tps:
        return kernel, kernel
    space = prep.template.space
    by_tp = {p.template_param: (n, p) for n, p in space.params.items() if p.template_param}
    missing = [tp.name for tp in tps if tp.name not in by_tp]
    if missing:
        raise KerntuneError(f"{kernel}: template parameters {missing} are not parameters of the space; Kernel Tuner "
                            "gets a template kernel's arguments from its name")
    return (f"{kernel}<{', '.join('KT_' + by_tp[tp.name][0] for tp in tps)}>",
            f"{kernel}<{', '.join(str(by_tp[tp.name][1].original) for tp in tps)}>")


def make_case(path: str, kernel: str) -> Case:
    from agent_core.search.tuner import prepare
    prep = prepare(path, kernel, use_workspace_files=False)
    t, spec = prep.template, prep.spec
    if t.launch is not None:
        raise KerntuneError(f"{kernel}: the template has its own launch ({t.origin}); Kernel Tuner takes the "
                            "block from parameters only: compare a structural template")
    params = t.space.params
    block_names, original_block = [], []
    orig = t.space.original_config()
    for e in spec.block:
        e = e.strip()
        if e in params:
            block_names.append("KT_" + e)
            original_block.append(int(orig[e]))
        else:
            raise KerntuneError(f"{kernel}: block '{e}' is not a single parameter; Kernel Tuner reads block "
                                "dimensions from parameters (block_size_names)")
    tune_params = {"KT_" + n: list(p.values) for n, p in params.items()}

    def restriction(p: dict) -> bool:
        return check_config(t.space, {n[3:]: v for n, v in p.items() if n.startswith("KT_")}, spec.sizes) is None

    n_valid = len(valid_configs(t.space, spec.sizes))
    kt_name, original_name = kt_names(prep, kernel)
    return Case(path, kernel, prep, kt_source(t.text, t.entry or t.kernel), kt_source(prep.text, kernel), tune_params,
                block_names, original_block, list(spec.grid), restriction, n_valid, kt_name, original_name)


def problem_size(case: Case, sizes: dict):
    """Kernel Tuner's problem size for one size set: the spec's grid (with grid_div = [] it is the grid)."""
    def size(p: dict) -> tuple:
        env = dict(sizes)
        env.update({n[3:]: v for n, v in p.items() if n.startswith("KT_")})
        g = [int(expr.evaluate_int(e, env)) for e in case.grid]
        return tuple(g + [1] * (3 - len(g)))
    return size


def arguments(case: Case, sizes: dict, seed: int) -> tuple[list, list[int]]:
    """Kernel arguments for one size set (numpy; inputs random like kerntune's defaults) and the indices of the
    buffers the kernel writes."""
    spec = case.prep.spec
    elems = spec_mod.buffer_elems(spec, sizes)
    scalars = spec_mod.scalar_values(spec, sizes)
    rng = np.random.default_rng(seed)
    args, outs = [], []
    for i, a in enumerate(spec.args):
        if a.dtype in ("f16", "bf16"):
            raise KerntuneError(f"argument {a.name}: {a.dtype} is not compared here (numpy has no bf16)")
        dt = np.dtype(spec_mod.dtype_info(a.dtype)[0])
        if a.role == "scalar":
            args.append(dt.type(scalars[a.name]))
            continue
        n = elems[a.name]
        if a.role == "out":
            args.append(np.zeros(n, dt))
        elif dt.kind == "f":
            args.append(rng.standard_normal(n).astype(dt))
        else:
            args.append(rng.integers(-100, 100, n).astype(dt))
        if a.role in ("out", "inout"):
            outs.append(i)
    return args, outs


# --------------------------------------------------------------------------------------------- Kernel Tuner
@dataclass
class Run:
    tool: str
    strategy: str
    wall_s: float
    evaluations: int  # configurations evaluated on every size set
    failed: int
    best: dict | None
    best_objective: float | None  # geomean over size sets of time / the original configuration's time
    time_to_5pct_s: float | None
    per_size: list[dict] = field(default_factory=list)
    retimed_speedup: float | None = None  # the best configuration, timed by kerntune's confirmation
    note: str = ""
    timeline: dict | None = None  # kerntune: where the run's wall time went (agent_core.measure.timeline report)
    kt_phases: dict | None = None  # Kernel Tuner: its own per-configuration times summed (seconds, every size set)
    backend: str = ""  # Kernel Tuner: the backend class its `lang` chose (CUDA: cuda-python, else CuPy, else PyCUDA)
    warm: bool = False  # kerntune: its GPU worker was up before the clock started (an editor session's, a bench's)

    @property
    def label(self) -> str:
        return self.strategy + (" (warm)" if self.warm else "")

    @property
    def per_minute(self) -> float | None:
        return self.evaluations / self.wall_s * 60 if self.wall_s > 0 else None


def kt_verify(spec, outs: list[int]):
    def verify(answer, result, atol=None):
        for i in outs:
            a = spec.args[i]
            rtol, at = spec_mod.tolerances(spec, a.dtype)
            if not np.allclose(result[i], answer[i], rtol=rtol, atol=at, equal_nan=False):
                return False
        return True
    return verify


def kt_backend(lang: str) -> str:
    """The backend Kernel Tuner uses for ``lang``: for "CUDA" the first installed of cuda-python (NVRTC), CuPy
    (NVRTC) and PyCUDA (nvcc), as kernel_tuner.core picks it."""
    if lang.upper() != "CUDA":
        return lang
    try:
        from kernel_tuner.core import _select_default_cuda_backend
        return _select_default_cuda_backend().__name__
    except Exception as e:  # noqa: BLE001 (another Kernel Tuner version: say so rather than guess)
        return f"unknown ({type(e).__name__})"


def run_kernel_tuner(case: Case, strategy: str, budget: int | None, seed: int, lang: str = "CUDA") -> Run:
    from kernel_tuner import run_kernel, tune_kernel
    spec = case.prep.spec
    per_size, t_total = [], 0.0
    phases = dict.fromkeys(KT_PHASES, 0.0)
    orig_params = {n: v for n, v in zip(case.block_names, case.original_block)}
    for si, sizes in enumerate(spec.sizes):
        args, outs = arguments(case, sizes, seed + si)
        ps = problem_size(case, sizes)
        ref_params = {"block_size_x": case.original_block[0]}
        for k, d in zip(("block_size_y", "block_size_z"), case.original_block[1:]):
            ref_params[k] = d
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = run_kernel(case.original_name, case.original_source, ps({**orig_params, **{
                "KT_" + n: v for n, v in case.prep.template.space.original_config().items()}}), args, ref_params,
                grid_div_x=[], grid_div_y=[], grid_div_z=[], lang=lang)
        answer = [ref[i] if i in outs else None for i in range(len(args))]
        np.random.seed(seed)
        random.seed(seed)
        opts = {"max_fevals": budget} if budget and strategy != "brute_force" else {}
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res, env = tune_kernel(case.kt_name, case.kt_source, ps, args, case.tune_params, grid_div_x=[],
                                   grid_div_y=[], grid_div_z=[], restrictions=case.restriction, answer=answer,
                                   verify=kt_verify(spec, outs), lang=lang, block_size_names=case.block_names,
                                   strategy=strategy, strategy_options=opts, iterations=7, quiet=True)
        wall = time.perf_counter() - t0
        t_total += wall
        seen, order = {}, []
        for r in res:
            for k in KT_PHASES:
                v = r.get(k)
                phases[k] += v / 1e3 if isinstance(v, (int, float)) and math.isfinite(v) else 0.0
            key = tuple(r[n] for n in case.tune_params)
            if key in seen:
                continue
            t = r.get("time")
            ok = isinstance(t, (int, float)) and math.isfinite(t)
            seen[key] = float(t) if ok else None
            order.append((key, r.get("compile_time", 0) + r.get("verification_time", 0) + r.get("benchmark_time", 0)
                          + r.get("strategy_time", 0) + r.get("framework_time", 0)))
        per_size.append({"sizes": sizes, "wall_s": wall, "results": seen, "order": order})
    names = list(case.tune_params)
    orig_key = tuple(case.prep.template.space.original_config()[n[3:]] for n in names)
    common = set.intersection(*(set(p["results"]) for p in per_size))
    evaluated = len(common)
    failed = sum(1 for k in common if any(p["results"][k] is None for p in per_size))
    base = [p["results"].get(orig_key) for p in per_size]

    def objective(k) -> float | None:
        ts = [p["results"][k] for p in per_size]
        if any(t is None for t in ts):
            return None
        if all(b for b in base):
            return math.exp(sum(math.log(t / b) for t, b in zip(ts, base)) / len(ts))
        return math.exp(sum(math.log(t) for t in ts) / len(ts))  # the original configuration was not visited
    scored = {k: objective(k) for k in common}
    ok = {k: v for k, v in scored.items() if v is not None}
    best_key = min(ok, key=ok.get) if ok else None
    # time to 5%: the clock runs over the size sets one after another (KT's own per-configuration times)
    t5 = None
    if best_key is not None:
        clock, done_at = 0.0, {}
        for p in per_size:
            for key, ms in p["order"]:
                clock += ms / 1e3
                if key in common:
                    done_at[key] = clock if all(key in q["results"] for q in per_size) else done_at.get(key)
        within = [done_at[k] for k, v in ok.items() if v <= ok[best_key] * (1 + WITHIN) and k in done_at]
        t5 = min(within) if within else None
    best = {n[3:]: v for n, v in zip(names, best_key)} if best_key else None
    note = "" if all(b for b in base) else "the original configuration was not visited: objective is the geomean time"
    return Run("Kernel Tuner", strategy, t_total, evaluated, failed, best, ok.get(best_key) if best_key else None,
               t5, [{"sizes": p["sizes"], "wall_s": p["wall_s"], "evaluated": len(p["results"]),
                     "best_ms": min((v for v in p["results"].values() if v is not None), default=None)}
                    for p in per_size], note=note, kt_phases=phases, backend=kt_backend(lang))


# --------------------------------------------------------------------------------------------- kerntune
@contextlib.contextmanager
def kerntune_cache(path: Path):
    """KERNTUNE_CACHE (kerntune's compile cache) set to ``path`` for the block; a GPU worker started inside it
    inherits it (it keeps its helper kernels there)."""
    old = os.environ.get("KERNTUNE_CACHE")
    os.environ["KERNTUNE_CACHE"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("KERNTUNE_CACHE", None)
        else:
            os.environ["KERNTUNE_CACHE"] = old


@dataclass
class Installed:
    """What an installation of kerntune pays once, paid before the timed runs: the GPU worker's helper kernels
    compiled (``helper_cubin``, kept in the compile cache) and the device's copy bandwidth measured (kept in the
    results store)."""

    device: object  # DeviceInfo, with its copy bandwidth
    cache: Path  # the compile cache holding the helper kernels
    helpers: list[Path]
    seconds: float


def install_once(root: Path) -> Installed:
    from agent_core.measure.gpu_backend import GpuBackend
    cache = root / "setup-cache"
    t0 = time.monotonic()
    with kerntune_cache(cache):
        be = GpuBackend()
        try:
            dev = be.device()  # starts a worker: it compiles its helper kernels into the cache
            bw = be.measure_copy_bandwidth()
        finally:
            be.close()
    return Installed(replace(dev, copy_bandwidth_gbps=bw), cache, sorted(cache.glob("kt_helpers_*.cubin")),
                     time.monotonic() - t0)


def run_kerntune(case: Case, strategy: str, budget: int, seed: int, installed: Installed, workdir: Path,
                 warm: bool = False) -> Run:
    """One `tune` call as a user's `kerntune tune` makes it: a GPU worker of its own, a fresh results store (the
    device's copy bandwidth in it), a compile cache holding only the worker's helper kernels. ``warm``: the worker
    is started (its process and CUDA context up) before the clock starts, as an editor session's or a bench run's
    worker is for every kernel after its first, and as Kernel Tuner's process has CUDA up (the original's outputs
    computed) before its clock; the compile cache and the store are as fresh as a cold run's."""
    from agent_core.bench import time_to_within
    from agent_core.measure.gpu_backend import GpuBackend
    from agent_core.search.tuner import TuneOptions, tune
    from agent_core.store import Store
    cache = workdir / "cache"
    cache.mkdir(parents=True)
    for f in installed.helpers:
        shutil.copy2(f, cache / f.name)
    store = Store(workdir / "results.sqlite")
    store.put_device(installed.device)
    points: list = []
    with kerntune_cache(cache):
        be = GpuBackend()
        if warm:
            be.device()  # the worker process and its CUDA context, before the clock
        t0 = time.monotonic()

        def on_event(ev):
            if ev.kind == "evaluation" and ev.evaluation is not None:
                e = ev.evaluation
                points.append((time.monotonic() - t0, e.objective if e.ok else None))
        try:
            r = tune(case.path, case.kernel, be, store, TuneOptions(budget=budget, strategy=strategy, seed=seed,
                                                                    early_stop_after=None),
                     on_event=on_event, prepared=case.prep)
            wall = time.monotonic() - t0
        finally:
            be.close()
            store.close()
    c = r.summary["counts"]
    t5, best_obj = time_to_within(points, WITHIN)
    run = Run("kerntune", strategy, wall, c["measured"] - c.get("reused", 0), c["failed"],
              r.summary.get("best_params"), r.best.objective if r.best else None, t5, timeline=r.timeline, warm=warm)
    if c.get("reused"):
        run.note = f"{c['reused']} evaluations reused from the store, not counted"
    return run


# short names of the timeline's phases for the one-line breakdown
SHORT = {"prepare": "prepare", "worker_start": "worker start", "copy_bandwidth": "copy bandwidth",
         "original": "original", "compile": "compile wait", "verify": "verify", "time": "timing",
         "worker_call": "round trips", "confirm": "confirmation", "strategy": "strategy", "store": "store",
         "other": "other"}
# Kernel Tuner's own per-configuration records (milliseconds each; summed per run by run_kernel_tuner)
KT_PHASES = ("compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time")
FIXED = ("prepare", "worker_start", "copy_bandwidth", "original", "confirm")  # paid once per run, not per evaluation


def fixed_seconds(timeline: dict | None) -> float | None:
    if not timeline:
        return None
    return sum(r["s"] for r in timeline["phases"] if r["phase"] in FIXED)


def breakdown(run: Run) -> str:
    """One line: where a kerntune run's wall time went (its timeline's phases on the driving thread, which add up
    to the wall; work on other threads, compiling ahead, apart)."""
    tl_ = run.timeline
    if not tl_:
        return f"kerntune {run.label}: no timeline"
    parts = [f"{SHORT.get(r['phase'], r['phase'])} {r['s']:.2f}" for r in tl_["phases"]
             if r["s"] >= 0.005 or r["phase"] == "other"]
    line = f"kerntune {run.label}: {tl_['wall_s']:.1f} s = " + ", ".join(parts)
    over = {k: v for k, v in (tl_.get("overlapped") or {}).items() if v >= 0.05}
    if over:
        line += "; on other threads meanwhile: " + ", ".join(
            f"{'compiling ahead' if k == 'compile' else SHORT.get(k, k)} {v:.1f}" for k, v in over.items())
    fixed = fixed_seconds(tl_)
    rest = tl_["wall_s"] - fixed
    names = [SHORT[r["phase"]] for r in tl_["phases"] if r["phase"] in FIXED and r["s"] >= 0.005]
    if run.evaluations and rest > 0 and names:
        line += (f"; per-run fixed ({', '.join(names)}) {fixed:.1f} s, without it "
                 f"{run.evaluations / rest * 60:.0f} evaluations/min")
    if tl_.get("tallies"):
        line += "; compiles: " + render_tallies(tl_["tallies"])
    return line


def kt_breakdown(run: Run) -> str:
    """One line: Kernel Tuner's own records of where a run's time went, summed over its configurations and size
    sets, against the wall clock around its tune_kernel calls (the rest: context creation, its set-up)."""
    ph = run.kt_phases or {}
    total = sum(ph.values())
    parts = ", ".join(f"{k.removesuffix('_time')} {v:.2f}" for k, v in ph.items())
    n = max(1, run.evaluations) * max(1, len(run.per_size))
    comp = ph.get("compile_time", 0.0)
    return (f"Kernel Tuner {run.strategy}{f' ({run.backend})' if run.backend else ''}: {run.wall_s:.1f} s; its own records {total:.2f} s = {parts}; "
            f"outside them {run.wall_s - total:.2f} s; compile {comp / n * 1e3:.0f} ms per configuration and size set")


def retime(case: Case, runs: list[Run], backend) -> None:
    """Every run's best configuration timed by one method: kerntune's interleaved confirmation against the
    original on every size set (speedup = geometric mean over size sets of original / variant)."""
    from agent_core.search.tuner import confirm_configs
    todo = [r for r in runs if r.best]
    figures = confirm_configs(case.prep, backend, [(case.prep.template, r.best) for r in todo], rounds=5)
    for r, (orig, var) in zip(todo, figures):
        r.retimed_speedup = math.exp(sum(math.log(o.median_us / v.median_us) for o, v in zip(orig, var)) / len(orig))


# --------------------------------------------------------------------------------------------- command
def report(case: Case, runs: list[Run]) -> str:
    L = [f"{case.kernel} ({Path(case.path).name}): {case.n_valid} valid configurations, {len(case.prep.spec.sizes)} "
         "size sets", "",
         f"{'tool':<13} {'strategy':<18} {'evals':>5} {'failed':>6} {'wall s':>7} {'evals/min':>9} "
         f"{'to 5% s':>8} {'own best':>9} {'re-timed':>9}  best configuration"]
    for r in runs:
        L.append(f"{r.tool:<13} {r.label:<18} {r.evaluations:>5} {r.failed:>6} {r.wall_s:7.1f} "
                 f"{(r.per_minute or 0):9.1f} {('-' if r.time_to_5pct_s is None else f'{r.time_to_5pct_s:.1f}'):>8} "
                 f"{('-' if r.best_objective is None else f'{1 / r.best_objective:.2f}x'):>9} "
                 f"{('-' if r.retimed_speedup is None else f'{r.retimed_speedup:.2f}x'):>9}  {r.best}"
                 + (f"  ({r.note})" if r.note else ""))
    kn = [r for r in runs if r.tool == "kerntune"]
    if kn:
        L.append("")
        L += [breakdown(r) for r in kn]
    kt = [r for r in runs if r.tool == "Kernel Tuner" and r.kt_phases]
    if kt:
        L += [kt_breakdown(r) for r in kt]
    first = True
    for warm in (False, True):
        pair = rate_pair(runs, warm)
        if pair:
            a, b, same = pair
            if first:
                L.append("")
                first = False
            L.append(f"evaluations per minute, kerntune {a.label} over Kernel Tuner {b.strategy}"
                     f"{'' if same else ' (best rate of each: not the same configurations)'}: "
                     f"{a.per_minute / b.per_minute:.2f}x")
    return "\n".join(L)


def rate_pair(runs: list[Run], warm: bool = False) -> tuple[Run, Run, bool] | None:
    """(kerntune's run, Kernel Tuner's run, whether they evaluated the same configurations) whose rates are
    compared: exhaustive against brute force (the whole space); without one of them, the best rate of each.
    ``warm``: kerntune's runs whose worker was up before the clock (else those that started their own)."""
    kn = [r for r in runs if r.tool == "kerntune" and r.per_minute and r.warm == warm]
    kt = [r for r in runs if r.tool == "Kernel Tuner" and r.per_minute]
    if not kn or not kt:
        return None
    a = next((r for r in kn if r.strategy == "exhaustive"), None)
    b = next((r for r in kt if r.strategy == "brute_force"), None)
    if a and b:
        return a, b, True
    return max(kn, key=lambda r: r.per_minute), max(kt, key=lambda r: r.per_minute), False


def overall(results: list[tuple[Case, list[Run]]]) -> tuple[str, dict]:
    """Per kernel and over all of them: kerntune's rate over Kernel Tuner's (``rate_pair``), with kerntune's worker
    started in the run (cold) and, where such runs were made, up before it (warm); over all kernels the pooled
    rates (evaluations summed over kernels / wall time summed) and the geometric mean of the ratios."""
    data: dict = {"kernels": []}
    blocks = []
    for warm in (False, True):
        rows, pairs = [], []
        for case, runs in results:
            pair = rate_pair(runs, warm)
            if pair is None:
                continue
            a, b, same = pair
            pairs.append((case, pair))
            ratio = a.per_minute / b.per_minute
            data["kernels"].append({"kernel": case.kernel, "n_valid": case.n_valid, "kerntune": a.strategy,
                                    "warm": warm, "kernel_tuner": b.strategy, "same_configurations": same,
                                    "kerntune_per_minute": a.per_minute, "kernel_tuner_per_minute": b.per_minute,
                                    "ratio": ratio})
            rows.append(f"{case.kernel:<22} {case.n_valid:>7} {a.label + ' ' + f'{a.per_minute:.0f}':>22} "
                        f"{b.strategy + ' ' + f'{b.per_minute:.0f}':>24} {ratio:6.2f}x"
                        + ("" if same else "  (best rates)"))
        if not pairs:
            continue
        L = [f"evaluations per minute, kerntune ({'worker up before the clock' if warm else 'worker started in the run'})"
             " over Kernel Tuner:",
             f"{'kernel':<22} {'configs':>7} {'kerntune':>22} {'Kernel Tuner':>24} {'ratio':>7}"] + rows
        if len(pairs) > 1:
            ka = sum(a.evaluations for _, (a, _, _) in pairs) / sum(a.wall_s for _, (a, _, _) in pairs) * 60
            kb = sum(b.evaluations for _, (_, b, _) in pairs) / sum(b.wall_s for _, (_, b, _) in pairs) * 60
            geo = math.exp(sum(math.log(a.per_minute / b.per_minute) for _, (a, b, _) in pairs) / len(pairs))
            L.append(f"{'all kernels (pooled)':<22} {sum(c.n_valid for c, _ in pairs):>7} "
                     f"{ka:>22.0f} {kb:>24.0f} {ka / kb:6.2f}x   (geometric mean of the ratios {geo:.2f}x)")
            key = "warm_" if warm else ""
            data.update({f"{key}pooled_kerntune_per_minute": ka, f"{key}pooled_kernel_tuner_per_minute": kb,
                         f"{key}pooled_ratio": ka / kb, f"{key}geomean_ratio": geo})
        blocks.append("\n".join(L))
    return "\n\n".join(blocks), data


NOTES = ("own best: 1 / the run's best objective on its own clock (geomean over size sets of time / the original "
         "configuration's time); re-timed: that configuration timed interleaved with the original by kerntune's "
         "confirmation (5 rounds, every size set). The kerntune lines: seconds per phase of the run's timeline "
         "(agent_core.measure.timeline; compile wait: the run waiting for nvcc, the original's compilation "
         "included; round trips: loading variants and the pipe to the worker), and the rate without the per-run "
         "fixed phases.")


def dry_run(case: Case, path: str) -> None:
    from agent_core.measure.compiler import compile_kernel
    from agent_core.workspace import cache_dir
    orig = case.prep.template.space.original_config()
    defines = {"KT_" + n: v for n, v in orig.items()}
    for what, src, name, d in (("template", case.kt_source, case.kt_name, defines),
                               ("original", case.original_source, case.original_name, {})):
        entry = name
        if "<" in name:  # Kernel Tuner's own wrapper of a template kernel (kernel_tuner.core)
            from kernel_tuner.core import wrap_templated_kernel
            src, entry = wrap_templated_kernel(src, name)
        c = compile_kernel(src, entry, arch="sm_90", defines=d, cache_dir=cache_dir(),
                           include_dirs=[str(Path(path).parent)])
        print(f"  the Kernel Tuner source of the {what} compiles with nvcc: entry {c.symbol}"
              + (f" (Kernel Tuner's wrapper of {name})" if entry != name else "")
              + f", {c.resources.registers} registers")
    n = sum(1 for c in itertools.product(*case.tune_params.values())
            if case.restriction(dict(zip(case.tune_params, c))))
    print(f"  Kernel Tuner's restriction admits {n} configurations (kerntune's space: {case.n_valid})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", action="append", default=None,
                    help="FILE:KERNEL with a tuning spec; repeat for several kernels (default: "
                         "examples/row_sum.cu:row_sum)")
    ap.add_argument("--budget", type=int, default=20, help="evaluations for the strategies (not brute force / "
                                                           "exhaustive, which take the whole space)")
    ap.add_argument("--kt-strategies", nargs="*", default=list(KT_STRATEGIES))
    ap.add_argument("--kerntune-strategies", nargs="*", default=list(KERNTUNE_STRATEGIES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", choices=("cold", "warm", "both"), default="cold",
                    help="kerntune's GPU worker: started inside each run's clock as a CLI run starts it (cold), up "
                         "before the clock as in an editor session or a bench run after its first kernel (warm), "
                         "or each strategy run both ways, cold first")
    ap.add_argument("--lang", default="CUDA", help="Kernel Tuner backend: CUDA (pycuda) or cupy")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--store", type=Path, default=None, help="a folder to keep kerntune's per-run results stores "
                                                             "and compile caches in (default: a temporary one)")
    ap.add_argument("--dry-run", action="store_true", help="stop before anything needs a GPU")
    a = ap.parse_args(argv)
    cases: list[Case] = []
    for spec_ in a.kernel or ["examples/row_sum.cu:row_sum"]:
        path, kernel = spec_.rsplit(":", 1)
        path = str((ROOT / path) if not Path(path).is_absolute() else Path(path))
        case = make_case(path, kernel)
        cases.append(case)
        print(f"{kernel}: {case.n_valid} valid configurations of "
              f"{', '.join(f'{n}={v}' for n, v in case.tune_params.items())}; block from {case.block_names}, "
              f"grid {case.grid}" + (f"; Kernel Tuner's kernel {case.kt_name}" if case.kt_name != kernel else ""))
        for si, sizes in enumerate(case.prep.spec.sizes):
            args, outs = arguments(case, sizes, a.seed + si)
            orig = {"KT_" + n: v for n, v in case.prep.template.space.original_config().items()}
            print(f"  size set {si + 1} {sizes}: problem size {problem_size(case, sizes)(orig)}, "
                  f"{len(args)} arguments ({sum(x.nbytes for x in args if isinstance(x, np.ndarray)) / 1e6:.1f} MB), "
                  f"outputs {[case.prep.spec.args[i].name for i in outs]}")
    import kernel_tuner  # noqa: F401 - fail here, not after the kerntune runs, when it is missing
    if a.dry_run:
        for case in cases:
            print(f"{case.kernel}:")
            dry_run(case, case.path)
        print("dry run: stopping before the GPU")
        return 0
    import tempfile

    from agent_core.measure.gpu_backend import GpuBackend
    results: list[tuple[Case, list[Run]]] = []
    texts = []
    with tempfile.TemporaryDirectory(prefix="kt-compare-") as tmp:
        root = a.store or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        installed = install_once(root)
        print(f"setup, once per installation (not timed): {installed.device.name}, the GPU worker's helper kernels "
              f"compiled, copy bandwidth {installed.device.copy_bandwidth_gbps:.0f} GB/s measured: "
              f"{installed.seconds:.1f} s", flush=True)
        for case in cases:
            runs: list[Run] = []
            modes = {"cold": (False,), "warm": (True,), "both": (False, True)}[a.worker]
            for s in a.kerntune_strategies:
                for warm in modes:
                    budget = case.n_valid if s == "exhaustive" else a.budget
                    print(f"kerntune {case.kernel} {s}{' (warm)' if warm else ''} (budget {budget}) ...", flush=True)
                    work = Path(tempfile.mkdtemp(prefix=f"{case.kernel}-{s}-", dir=root))
                    try:
                        runs.append(run_kerntune(case, s, budget, a.seed, installed, work, warm=warm))
                    except Exception as e:  # noqa: BLE001 - one run's failure is reported, the others still run
                        runs.append(Run("kerntune", s, 0.0, 0, 0, None, None, None, warm=warm,
                                        note=f"failed: {type(e).__name__}: {e}"))
            for s in a.kt_strategies:
                print(f"Kernel Tuner {case.kernel} {s} ...", flush=True)
                try:
                    runs.append(run_kernel_tuner(case, s, a.budget, a.seed, a.lang))
                except Exception as e:  # noqa: BLE001 - one strategy's failure is reported, the others still run
                    runs.append(Run("Kernel Tuner", s, 0.0, 0, 0, None, None, None,
                                    note=f"failed: {type(e).__name__}: {e}"))
            with kerntune_cache(installed.cache):
                be = GpuBackend()
                try:
                    retime(case, runs, be)
                finally:
                    be.close()
            results.append((case, runs))
            texts.append(report(case, runs))
            print(texts[-1], flush=True)
    summary, data = overall(results)
    print()
    if summary:
        print(summary)
        print()
    print(NOTES)
    print()
    print("Not like for like:")
    print("\n".join(f"- {n}" for n in NOT_LIKE_FOR_LIKE))
    if a.json:
        a.json.write_text(json.dumps({
            "device": installed.device.name, "setup_s": installed.seconds, "budget": a.budget, "seed": a.seed,
            "kernels": [{"kernel": c.kernel, "path": c.path, "n_valid": c.n_valid, "size_sets": c.prep.spec.sizes,
                         "kt_name": c.kt_name,
                         "runs": [dict(r.__dict__) | {"per_minute": r.per_minute,
                                                      "fixed_s": fixed_seconds(r.timeline)} for r in runs]}
                        for c, runs in results],
            "overall": data, "not_like_for_like": NOT_LIKE_FOR_LIKE}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
