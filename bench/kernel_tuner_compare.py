"""kerntune and Kernel Tuner side by side, on the GPU, in one run: the same kernel, the same parameter space, the
same verification against the original's outputs.

For each kernel (default: ``examples/row_sum.cu``'s ``row_sum``), kerntune's structural template (the user's
file with every tunable as a ``KT_<PARAM>`` macro) is also a Kernel Tuner kernel: Kernel Tuner passes tunable
parameters as ``#define``s, so its parameters are named ``KT_<PARAM>`` and the template's header defaults step
aside. Kernel Tuner is used as its documentation says: ``tune_kernel`` with its own timing (``iterations=7``,
the mean), its strategies (``brute_force``, ``random_sample``, ``genetic_algorithm``, ``bayes_opt``; a budget
through ``strategy_options={"max_fevals": B}``), the space's constraints as its restriction (the same
function kerntune checks), and ``answer`` + ``verify`` holding the original kernel's outputs (run once per size
set with ``run_kernel`` at the original launch) with the spec's tolerances. Kernel Tuner tunes one problem size
per call, so it runs once per size set of the spec and a configuration counts as evaluated when it has been
evaluated on every size set; kerntune's ``tune`` evaluates a configuration on all of them at once.

Printed per tool and strategy: evaluations (configurations over all size sets) per minute, the time to come
within 5% of that run's own best, and the best configuration; then every run's best configuration timed again
by one method (kerntune's interleaved confirmation against the original, every size set), so that "best found"
is compared on the same clock. The notes at the end say where the comparison is not like for like.

    python bench/kernel_tuner_compare.py [--kernel FILE:KERNEL] [--budget 20] [--kt-strategies ...]
        [--kerntune-strategies ...] [--json OUT] [--dry-run]

``--dry-run`` (any machine with nvcc): builds the spaces, the Kernel Tuner sources and arguments, compiles the
Kernel Tuner source of the original configuration with nvcc, and stops before anything needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from agent_core import expr  # noqa: E402
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
    "Kernel Tuner on one set of inputs per size set, reused for every configuration, with outputs zeroed; kerntune "
    "on fresh random inputs for every configuration and size set, outputs poisoned (NaN / 0xFF) before each run.",
    "problem sizes: Kernel Tuner tunes one problem size per call, so it is run once per size set (its time and "
    "evaluations summed, its best per size set reported and its best over all size sets taken as the "
    "configuration with the lowest geometric mean of time / the original configuration's time, where both size "
    "sets have it); kerntune evaluates every configuration on all size sets in one pass and ranks by that "
    "geometric mean.",
    "compiling: Kernel Tuner compiles one configuration at a time (pycuda's SourceModule, its cache on); kerntune "
    "compiles a batch in parallel (nvcc, its cache on) while the GPU measures the previous batch.",
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
    size_sets: list[dict] = field(default_factory=list)


def kt_source(text: str, kernel: str) -> str:
    """``text`` cut after the definition of ``kernel``, its ``#include``s dropped and the kernel given C linkage:
    what pycuda's SourceModule (Kernel Tuner's CUDA backend) compiles and finds by name."""
    cf = parse_cuda(text)
    k = cf.kernel(kernel)
    lines = text.splitlines()
    head = "\n".join(ln if not ln.lstrip().startswith("#include") else "// " + ln for ln in lines[:k.span.line])
    body = "\n".join(lines[k.span.line:k.span.end_line + 1])
    if "__global__" not in body:
        raise KerntuneError(f"no __global__ in the definition of {kernel}")
    return head + "\nextern \"C\" " + body + "\n"


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
    return Case(path, kernel, prep, kt_source(t.text, t.entry or t.kernel), kt_source(prep.text, kernel), tune_params,
                block_names, original_block, list(spec.grid), restriction, n_valid)


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


def run_kernel_tuner(case: Case, strategy: str, budget: int | None, seed: int, lang: str = "CUDA") -> Run:
    from kernel_tuner import run_kernel, tune_kernel
    spec = case.prep.spec
    per_size, t_total = [], 0.0
    orig_params = {n: v for n, v in zip(case.block_names, case.original_block)}
    for si, sizes in enumerate(spec.sizes):
        args, outs = arguments(case, sizes, seed + si)
        ps = problem_size(case, sizes)
        ref_params = {"block_size_x": case.original_block[0]}
        for k, d in zip(("block_size_y", "block_size_z"), case.original_block[1:]):
            ref_params[k] = d
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = run_kernel(case.kernel, case.original_source, ps({**orig_params, **{
                "KT_" + n: v for n, v in case.prep.template.space.original_config().items()}}), args, ref_params,
                grid_div_x=[], grid_div_y=[], grid_div_z=[], lang=lang)
        answer = [ref[i] if i in outs else None for i in range(len(args))]
        np.random.seed(seed)
        random.seed(seed)
        opts = {"max_fevals": budget} if budget and strategy != "brute_force" else {}
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res, env = tune_kernel(case.kernel, case.kt_source, ps, args, case.tune_params, grid_div_x=[],
                                   grid_div_y=[], grid_div_z=[], restrictions=case.restriction, answer=answer,
                                   verify=kt_verify(spec, outs), lang=lang, block_size_names=case.block_names,
                                   strategy=strategy, strategy_options=opts, iterations=7, quiet=True)
        wall = time.perf_counter() - t0
        t_total += wall
        seen, order = {}, []
        for r in res:
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
                    for p in per_size], note=note)


# --------------------------------------------------------------------------------------------- kerntune
def run_kerntune(case: Case, strategy: str, budget: int, seed: int, backend, store) -> Run:
    from agent_core.bench import time_to_within
    from agent_core.search.tuner import TuneOptions, tune
    points, t0 = [], time.monotonic()

    def on_event(ev):
        if ev.kind == "evaluation" and ev.evaluation is not None:
            e = ev.evaluation
            points.append((time.monotonic() - t0, e.objective if e.ok else None))
    r = tune(case.path, case.kernel, backend, store, TuneOptions(budget=budget, strategy=strategy, seed=seed,
                                                                 early_stop_after=None),
             on_event=on_event, prepared=case.prep)
    wall = time.monotonic() - t0
    c = r.summary["counts"]
    t5, best_obj = time_to_within(points, WITHIN)
    run = Run("kerntune", strategy, wall, c["measured"], c["failed"], r.summary.get("best_params"),
              r.best.objective if r.best else None, t5)
    run.per_size = [{"timeline": r.timeline}]
    return run


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
        L.append(f"{r.tool:<13} {r.strategy:<18} {r.evaluations:>5} {r.failed:>6} {r.wall_s:7.1f} "
                 f"{(r.per_minute or 0):9.1f} {('-' if r.time_to_5pct_s is None else f'{r.time_to_5pct_s:.1f}'):>8} "
                 f"{('-' if r.best_objective is None else f'{1 / r.best_objective:.2f}x'):>9} "
                 f"{('-' if r.retimed_speedup is None else f'{r.retimed_speedup:.2f}x'):>9}  {r.best}"
                 + (f"  ({r.note})" if r.note else ""))
    kt = [r for r in runs if r.tool == "Kernel Tuner" and r.per_minute]
    kn = [r for r in runs if r.tool == "kerntune" and r.per_minute]
    if kt and kn:
        L.append("")
        L.append(f"evaluations per minute, kerntune over Kernel Tuner (best rate of each): "
                 f"{max(r.per_minute for r in kn) / max(r.per_minute for r in kt):.2f}x")
    L += ["", "own best: 1 / the run's best objective on its own clock (geomean over size sets of time / the original "
          "configuration's time); re-timed: that configuration timed interleaved with the original by kerntune's "
          "confirmation (5 rounds, every size set).", "", "Not like for like:"]
    L += [f"- {n}" for n in NOT_LIKE_FOR_LIKE]
    return "\n".join(L)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default="examples/row_sum.cu:row_sum", help="FILE:KERNEL with a tuning spec")
    ap.add_argument("--budget", type=int, default=20, help="evaluations for the strategies (not brute force / "
                                                           "exhaustive, which take the whole space)")
    ap.add_argument("--kt-strategies", nargs="*", default=list(KT_STRATEGIES))
    ap.add_argument("--kerntune-strategies", nargs="*", default=list(KERNTUNE_STRATEGIES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lang", default="CUDA", help="Kernel Tuner backend: CUDA (pycuda) or cupy")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--store", type=Path, default=None, help="kerntune's results store (default: a fresh temporary one)")
    ap.add_argument("--dry-run", action="store_true", help="stop before anything needs a GPU")
    a = ap.parse_args(argv)
    path, kernel = a.kernel.rsplit(":", 1)
    path = str((ROOT / path) if not Path(path).is_absolute() else Path(path))
    case = make_case(path, kernel)
    print(f"{kernel}: {case.n_valid} valid configurations of {', '.join(f'{n}={v}' for n, v in case.tune_params.items())}; "
          f"block from {case.block_names}, grid {case.grid}")
    for si, sizes in enumerate(case.prep.spec.sizes):
        args, outs = arguments(case, sizes, a.seed + si)
        orig = {"KT_" + n: v for n, v in case.prep.template.space.original_config().items()}
        print(f"  size set {si + 1} {sizes}: problem size {problem_size(case, sizes)(orig)}, "
              f"{len(args)} arguments ({sum(x.nbytes for x in args if isinstance(x, np.ndarray)) / 1e6:.1f} MB), "
              f"outputs {[case.prep.spec.args[i].name for i in outs]}")
    import kernel_tuner  # noqa: F401 - fail here, not after the kerntune runs, when it is missing
    if a.dry_run:
        from agent_core.measure.compiler import compile_kernel
        from agent_core.workspace import cache_dir
        orig = case.prep.template.space.original_config()
        defines = {"KT_" + n: v for n, v in orig.items()}
        for what, src, d in (("template", case.kt_source, defines), ("original", case.original_source, {})):
            c = compile_kernel(src, case.kernel, arch="sm_90", defines=d, cache_dir=cache_dir(),
                               include_dirs=[str(Path(path).parent)])
            print(f"  the Kernel Tuner source of the {what} compiles with nvcc: entry {c.symbol}, "
                  f"{c.resources.registers} registers")
        n = sum(1 for c in __import__("itertools").product(*case.tune_params.values())
                if case.restriction(dict(zip(case.tune_params, c))))
        print(f"  Kernel Tuner's restriction admits {n} configurations (kerntune's space: {case.n_valid})")
        print("dry run: stopping before the GPU")
        return 0
    import tempfile

    from agent_core.measure.gpu_backend import GpuBackend
    from agent_core.store import Store
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="kt-compare-") as tmp:
        store = Store(a.store or Path(tmp) / "results.sqlite")
        be = GpuBackend()
        try:
            for s in a.kerntune_strategies:
                budget = case.n_valid if s == "exhaustive" else a.budget
                print(f"kerntune {s} (budget {budget}) ...", flush=True)
                runs.append(run_kerntune(case, s, budget, a.seed, be, store))
            be.close()  # Kernel Tuner's context gets the GPU to itself
            for s in a.kt_strategies:
                print(f"Kernel Tuner {s} ...", flush=True)
                try:
                    runs.append(run_kernel_tuner(case, s, a.budget, a.seed, a.lang))
                except Exception as e:  # noqa: BLE001 - one strategy's failure is reported, the others still run
                    runs.append(Run("Kernel Tuner", s, 0.0, 0, 0, None, None, None,
                                    note=f"failed: {type(e).__name__}: {e}"))
            be = GpuBackend()
            retime(case, runs, be)
        finally:
            be.close()
            store.close()
    text = report(case, runs)
    print(text)
    if a.json:
        a.json.write_text(json.dumps({"kernel": kernel, "path": path, "budget": a.budget, "runs": [
            {k: v for k, v in r.__dict__.items()} | {"per_minute": r.per_minute} for r in runs],
            "not_like_for_like": NOT_LIKE_FOR_LIKE}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
