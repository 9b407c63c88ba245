"""kerntune's search strategies against random search on brute-forced spaces from the GPU recordings.

The score is that of Willemsen et al., "A methodology for comparing optimization algorithms for auto-tuning"
(FGCS 2024): after k evaluations, score(k) = (random(k) - found(k)) / (random(k) - optimum), where found(k) is
the best objective (variant time / original time, lower is better) a strategy has after k evaluations,
optimum the best of the whole space and random(k) the exact expected best of k configurations drawn at random
without replacement (``strategies.expected_random_best``); 1 = the optimum, 0 = as good as random search,
negative = worse. A strategy's score at a budget B is the mean of score(k) over k = 1..B (the area under its
curve, as the methodology aggregates over the budget), over many seeded repeats; ``final`` is score(B) alone.

Spaces come only from recordings (``tests/data/stores/*.sqlite``): a (template, spec, device) whose recorded
configurations cover every configuration the space file allows ("complete"). A space whose recording misses
some is reported with how many, and scored on its completely recorded sub-space only when asked
(``--sub-spaces``). Every evaluation goes through the replay backend, like a tuning session in CI: a
configuration that failed on the GPU (compile, verification, crash) costs one evaluation and finds nothing;
one pruned by the hardware check costs nothing, as in the tuner. Budgets at or above the space's size are
skipped (random search there finds the optimum by construction).

With ``--kernel-tuner STRATEGY ...`` Kernel Tuner's strategies (PyPI ``kernel_tuner``, its simulation mode:
``tune_kernel(..., cache=FILE, simulation_mode=True)``, the way its documentation replays a brute-forced
cache file) run on the same spaces: each space is written as a Kernel Tuner cache file (objective as
``time``, failed configurations as ``RuntimeFailedConfig``), the space's constraints as its restriction, and
each unique configuration Kernel Tuner visits counts as one evaluation, failed ones included (as kerntune's).

    python bench/strategy_scores.py [STORE(.sqlite or .sqlite.gz) ...] [--budgets 20 50] [--repeats 100] [--batch 1] [--json out.json]
        [--sub-spaces] [--early-stop N] [--kernel-tuner random_sample genetic_algorithm bayes_opt ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent_core.measure.backend import Problem, Variant  # noqa: E402
from agent_core.measure.replay import ReplayBackend, ReplayMiss  # noqa: E402
from agent_core.model import Status, params_key  # noqa: E402
from agent_core.search.strategies import expected_random_best, make_strategy  # noqa: E402
from agent_core.store import Store  # noqa: E402
from agent_core.templating.space import space_from_toml, valid_configs  # noqa: E402

STORES = ROOT / "tests" / "data" / "stores"
STRATEGIES = ("exhaustive", "random", "tpe", "tpe_ranked", "auto")
VALID_LIMIT = 200_000  # spaces with more valid configurations than this are not brute-forced here


@dataclass
class RecordedSpace:
    """One template's space as recorded on a GPU: objective per valid configuration (inf: failed there)."""

    store: Path
    kernel: str
    origin: str
    template_hash: str
    spec_hash: str
    device: str
    original_hash: str
    space: object  # ParamSpace
    sizes: list[dict]
    objectives: dict[str, float] = field(default_factory=dict)  # params_key -> objective (inf: failed)
    pruned: set[str] = field(default_factory=set)  # recorded as pruned by the hardware check: cost nothing
    n_valid: int = 0  # configurations the space file allows
    missing: int = 0  # of those, not recorded
    per_set: dict[str, list[float]] = field(default_factory=dict)  # params_key -> median us on each size set (verified)

    @property
    def name(self) -> str:
        return f"{self.kernel} {self.origin} ({self.store.name}, {self.template_hash[:8]})"

    @property
    def complete(self) -> bool:
        return self.missing == 0

    @property
    def optimum(self) -> float:
        return min(self.objectives.values())

    def values(self) -> list[float]:
        return list(self.objectives.values())


def recorded_spaces(store_path: Path) -> list[RecordedSpace]:
    """Every (template, spec, device) of the store with at least one verified configuration, with how much of
    its space the recording covers."""
    out = []
    with Store(store_path) as st:
        groups = st._read("SELECT DISTINCT template_hash, spec_hash, device FROM evaluations")
        for g in groups:
            th, sh, dev = g["template_hash"], g["spec_hash"], g["device"]
            tpl = st.get_template(th)
            sess = st._read("SELECT original_hash, summary_json FROM sessions WHERE template_hash=? AND spec_hash=? "
                            "AND device=? AND summary_json IS NOT NULL ORDER BY id DESC LIMIT 1", (th, sh, dev))
            if tpl is None or not tpl.get("space_toml") or not sess:
                continue
            summary = json.loads(sess[0]["summary_json"])
            sizes = summary.get("sizes") or []
            space, _ = space_from_toml(tpl["space_toml"])
            evs = st.evaluations(template_hash=th, spec_hash=sh, device=dev)
            latest: dict[str, object] = {}
            for ev in evs:  # the most recent recording of each configuration (as the replay answers)
                latest[params_key(ev.params)] = ev
            objectives, pruned, per_set = {}, set(), {}
            for k, ev in latest.items():
                if ev.status == Status.PRUNED:
                    pruned.add(k)
                elif ev.status == Status.OK and ev.objective is not None:
                    objectives[k] = float(ev.objective)
                    if ev.timings and all(t is not None and t.median_us > 0 for t in ev.timings):
                        per_set[k] = [t.median_us for t in ev.timings]
                else:
                    objectives[k] = math.inf
            if not any(math.isfinite(v) for v in objectives.values()):
                continue
            if space.size() > VALID_LIMIT:
                continue
            valid = {params_key(c) for c in valid_configs(space, sizes)}
            recorded = set(objectives) | pruned
            objectives = {k: v for k, v in objectives.items() if k in valid}
            pruned &= valid
            out.append(RecordedSpace(store_path, tpl["kernel"], tpl.get("origin") or "?", th, sh, dev,
                                     sess[0]["original_hash"], space, sizes, objectives, pruned, len(valid),
                                     len(valid - recorded), {k: v for k, v in per_set.items() if k in objectives}))
    return out


def sub_space(rs: RecordedSpace) -> RecordedSpace:
    """The completely recorded part of a space: its domains narrowed until every combination the constraints
    allow was recorded, greedily dropping the value that loses the fewest recorded configurations per missing one
    it removes (an exhaustive run cut off by its budget recorded whole values of its first parameters). The
    constraints judge one configuration at a time, so a narrowed space's valid configurations are the full
    space's valid ones whose values it keeps."""
    import copy
    space = copy.deepcopy(rs.space)
    recorded = set(rs.objectives) | rs.pruned
    all_valid = {params_key(c): c for c in valid_configs(rs.space, rs.sizes)}

    def valid_in(domains: dict[str, set]) -> set[str]:
        return {k for k, c in all_valid.items() if all(c[n] in vs for n, vs in domains.items())}
    domains = {n: set(p.values) for n, p in space.params.items()}
    while True:
        valid = valid_in(domains)
        missing = valid - recorded
        if not missing:
            break
        best = None
        for name, vs in domains.items():
            if len(vs) <= 1:
                continue
            for v in sorted(vs):
                tv = valid_in({**domains, name: vs - {v}})
                lost, removed = len((valid & recorded) - tv), len(missing - tv)
                key = (lost / max(removed, 1), -removed)
                if best is None or key < best[0]:
                    best = (key, name, v)
        if best is None:
            return RecordedSpace(**{**rs.__dict__, "objectives": {}, "missing": len(missing)})
        _, name, v = best
        domains[name] = domains[name] - {v}
    for name, p in space.params.items():
        p.values = [x for x in p.values if x in domains[name]]
        if p.original not in p.values:
            p.original = p.values[0]
    objs = {k: v for k, v in rs.objectives.items() if k in valid}
    return RecordedSpace(**{**rs.__dict__, "origin": rs.origin + " (sub-space)", "space": space,
                            "objectives": objs, "pruned": rs.pruned & valid, "n_valid": len(valid), "missing": 0,
                            "per_set": {k: v for k, v in rs.per_set.items() if k in objs}})


# --------------------------------------------------------------------------------------------- runs
def replay_for(rs: RecordedSpace) -> ReplayBackend:
    be = ReplayBackend(Store(rs.store), device=rs.device)
    be.start(Problem(spec=None, reference=None, reference_launches=[], original_hash=rs.original_hash,
                     template_hash=rs.template_hash, spec_hash=rs.spec_hash))
    return be


def search_curve(rs: RecordedSpace, be: ReplayBackend, strategy: str, seed: int, budget: int, batch: int = 1,
                 early_stop_after: int | None = None, evaluated: list[str] | None = None) -> list[float]:
    """Best objective after each of ``budget`` evaluations of ``strategy`` over the replayed space (asked
    ``batch`` at a time and told after the batch, as the GPU tuner does); after an early stop or an exhausted
    space the best stays. Pruned configurations cost nothing; failed ones one evaluation each. ``evaluated``,
    when given, receives the params_key of every configuration evaluated, in order."""
    from agent_core.search.tuner import EARLY_STOP_GAIN
    st = make_strategy(strategy, rs.space, rs.sizes, seed=seed, budget=budget)
    best, curve, gain_at = math.inf, [], 0
    while len(curve) < budget:
        cfgs = st.ask(min(batch, budget - len(curve)))
        if not cfgs:
            break
        told = []
        for cfg in cfgs:
            key = params_key(cfg)
            if key in rs.pruned:
                told.append((cfg, None))
                continue
            try:
                ev = be.evaluate(Variant(params=cfg, compiled=None, launches=[]))
            except ReplayMiss:
                raise RuntimeError(f"{rs.name}: {cfg} is not recorded; score complete (sub-)spaces only") from None
            obj = ev.objective if ev.status == Status.OK else None
            told.append((cfg, obj))
            if evaluated is not None:
                evaluated.append(key)
            if obj is not None and obj < best:
                if best == math.inf or obj < best * (1 - EARLY_STOP_GAIN):
                    gain_at = len(curve) + 1
                best = obj
            curve.append(best)
        for cfg, obj in told:
            st.tell(cfg, obj)
        if early_stop_after and best < math.inf and len(curve) - gain_at >= early_stop_after:
            break
    return curve + [curve[-1] if curve else math.inf] * (budget - len(curve))


def dispatch_ratio(rs: RecordedSpace, evaluated: list[str]) -> float:
    """How well the configurations a search evaluated serve a per-shape dispatch: the geometric mean over the
    size sets of (the best time among them on that size set) / (the best time of the whole space there); 1.0 =
    every size set served at the space's optimum for it. NaN when the recording has no per-size-set times."""
    if not rs.per_set:
        return math.nan
    n = len(next(iter(rs.per_set.values())))
    opt = [min(t[i] for t in rs.per_set.values()) for i in range(n)]
    seen = set(evaluated)
    got = [t for k, t in rs.per_set.items() if k in seen]
    if not got:
        return math.inf
    return math.exp(sum(math.log(min(t[i] for t in got) / opt[i]) for i in range(n)) / n)


def random_curve(values: list[float], budget: int) -> list[float]:
    """The exact expected best of k = 1..budget random draws without replacement."""
    return [expected_random_best(values, k) for k in range(1, budget + 1)]


def scores(curve: list[float], rand: list[float], optimum: float) -> list[float]:
    out = []
    for found, r in zip(curve, rand):
        span = r - optimum
        if not math.isfinite(r) or span <= 0:
            out.append(1.0 if found <= optimum else 0.0)
        elif not math.isfinite(found):
            out.append(-1.0)  # nothing verified yet while random search has found something: worse than random
        else:
            out.append((r - found) / span)
    return out


@dataclass
class Score:
    space: str
    strategy: str
    budget: int
    mean: float  # over the repeats, of the mean of score(k) over k = 1..budget
    final: float  # over the repeats, score(budget)
    stdev: float  # of the per-repeat means
    found_optimum: float  # fraction of repeats that found the optimum within the budget
    repeats: int
    dispatch: float = math.nan  # mean over the repeats of dispatch_ratio after the budget (1.0: all at optimum)


def score_space(rs: RecordedSpace, strategies: list[str], budgets: list[int], repeats: int, batch: int = 1,
                early_stop_after: int | None = None) -> list[Score]:
    vals = rs.values()
    n = len(vals)
    opt = rs.optimum
    out = []
    be = replay_for(rs)
    try:
        for b in budgets:
            if b >= n:
                continue
            rand = random_curve(vals, b)
            for s in strategies:
                reps = 1 if s == "exhaustive" else repeats
                per_mean, per_final, hits, per_dispatch = [], [], 0, []
                for seed in range(reps):
                    evaluated: list[str] = []
                    c = search_curve(rs, be, s, seed, b, batch, early_stop_after, evaluated)
                    sc = scores(c, rand, opt)
                    per_mean.append(sum(sc) / len(sc))
                    per_final.append(sc[-1])
                    hits += c[-1] <= opt
                    per_dispatch.append(dispatch_ratio(rs, evaluated))
                m = sum(per_mean) / reps
                sd = math.sqrt(sum((x - m) ** 2 for x in per_mean) / max(1, reps - 1))
                label = s + (f"+stop{early_stop_after}" if early_stop_after else "")
                out.append(Score(rs.name, label, b, m, sum(per_final) / reps, sd, hits / reps, reps,
                                 sum(per_dispatch) / reps))
    finally:
        be.close()
    return out


# --------------------------------------------------------------------------------------------- Kernel Tuner
KT_STRATEGIES = ("random_sample", "genetic_algorithm", "bayes_opt", "greedy_ils", "simulated_annealing", "pso",
                 "diff_evo", "firefly_algorithm", "mls", "basinhopping", "dual_annealing")


def kt_cache_file(rs: RecordedSpace, path: Path) -> tuple[dict, object]:
    """Write the space as a Kernel Tuner cache file; (tune_params, restriction) to pass to tune_kernel."""
    names = list(rs.space.params)
    tune_params = {n: list(p.values) for n, p in rs.space.params.items()}
    cache = {}
    for c in valid_configs(rs.space, rs.sizes):
        k = params_key(c)
        if k not in rs.objectives:
            continue  # pruned by the hardware check: left out of the space (the restriction below too)
        o = rs.objectives[k]
        e = dict(c)
        e["time"] = o if math.isfinite(o) else "RuntimeFailedConfig"
        e.update(compile_time=0, verification_time=0, benchmark_time=0, strategy_time=0, framework_time=0,
                 timestamp="")
        cache[",".join(str(c[n]) for n in names)] = e
    path.write_text(json.dumps({"device_name": "Simulation", "kernel_name": rs.kernel, "problem_size": [1, 1, 1],
                                "tune_params_keys": names, "tune_params": tune_params, "objective": "time",
                                "cache": cache}))
    allowed = set(rs.objectives)

    def restriction(p: dict) -> bool:
        return params_key({n: p[n] for n in names}) in allowed
    return tune_params, restriction


def kt_curve(rs: RecordedSpace, strategy: str, seed: int, budget: int, cache: Path, tune_params: dict,
             restriction) -> list[float]:
    """Best objective after each unique configuration Kernel Tuner's ``strategy`` visits (simulation mode)."""
    import random
    import warnings

    import numpy as np
    from kernel_tuner import tune_kernel
    np.random.seed(seed)
    random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, _ = tune_kernel(rs.kernel, "__global__ void k() {}", (1, 1, 1), [], tune_params,
                             restrictions=restriction, cache=str(cache), simulation_mode=True, strategy=strategy,
                             strategy_options={"max_fevals": budget}, quiet=True)
    names = list(tune_params)
    seen, best, curve = set(), math.inf, []
    for r in res:
        k = tuple(r[n] for n in names)
        if k in seen:
            continue
        seen.add(k)
        t = r.get("time")
        if isinstance(t, (int, float)) and math.isfinite(t):
            best = min(best, float(t))
        curve.append(best)
        if len(curve) == budget:
            break
    return curve + [curve[-1] if curve else math.inf] * (budget - len(curve))


def score_space_kt(rs: RecordedSpace, strategies: list[str], budgets: list[int], repeats: int,
                   workdir: Path) -> list[Score]:
    vals, opt, out = rs.values(), rs.optimum, []
    cache = workdir / f"kt_{rs.template_hash[:12]}_{rs.spec_hash[:8]}.json"
    tune_params, restriction = kt_cache_file(rs, cache)
    for b in budgets:
        if b >= len(vals):
            continue
        rand = random_curve(vals, b)
        for s in strategies:
            per_mean, per_final, hits = [], [], 0
            try:
                curves = [kt_curve(rs, s, seed, b, cache, tune_params, restriction) for seed in range(repeats)]
            except Exception as e:  # noqa: BLE001 - a strategy that breaks on this space is reported, not scored
                print(f"{rs.name}: Kernel Tuner's {s} failed at budget {b}: {type(e).__name__}: {e}")
                continue
            for c in curves:
                sc = scores(c, rand, opt)
                per_mean.append(sum(sc) / len(sc))
                per_final.append(sc[-1])
                hits += c[-1] <= opt
            m = sum(per_mean) / repeats
            sd = math.sqrt(sum((x - m) ** 2 for x in per_mean) / max(1, repeats - 1))
            out.append(Score(rs.name, "KT " + s, b, m, sum(per_final) / repeats, sd, hits / repeats, repeats))
    return out


# --------------------------------------------------------------------------------------------- command
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stores", nargs="*", type=Path,
                    help=f"recorded stores, .sqlite or .sqlite.gz (default: {STORES}/*.sqlite)")
    ap.add_argument("--budgets", nargs="+", type=int, default=[20, 50])
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--batch", type=int, default=1, help="configurations asked before results are told")
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    ap.add_argument("--early-stop", type=int, default=None, help="also score with this early stop (evaluations)")
    ap.add_argument("--sub-spaces", action="store_true", help="score the completely recorded sub-space of an "
                                                                "incomplete recording")
    ap.add_argument("--kernel-tuner", nargs="*", default=None, metavar="STRATEGY",
                    help="also Kernel Tuner's strategies in its simulation mode (no names: " + ", ".join(KT_STRATEGIES)
                    + ")")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    stores = a.stores or sorted(STORES.glob("*.sqlite"))
    import tempfile
    unzipped = tempfile.TemporaryDirectory(prefix="kt-scores-")  # .sqlite.gz recordings, read from a copy here
    return _main(a, [_unzip(p, Path(unzipped.name)) for p in stores])


def _unzip(p: Path, into: Path) -> Path:
    """``p`` itself, or for ``X.sqlite.gz`` (the brute-forced recordings under gpu/results) a copy unzipped into
    ``into``."""
    if p.suffix != ".gz":
        return p
    import gzip
    import shutil
    out = into / p.name.removesuffix(".gz")
    with gzip.open(p, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def _main(a: argparse.Namespace, stores: list[Path]) -> int:
    spaces, seen = [], set()
    for p in stores:
        for rs in recorded_spaces(p):
            key = (rs.template_hash, rs.spec_hash, rs.device)
            if key in seen:
                continue  # the same recording in another store (a copy)
            seen.add(key)
            print(f"{rs.name}: {len(rs.objectives)} of {rs.n_valid} valid configurations recorded"
                  + ("" if rs.complete else f", {rs.missing} missing")
                  + f" ({sum(not math.isfinite(v) for v in rs.objectives.values())} failed, {len(rs.pruned)} pruned)")
            if rs.complete:
                spaces.append(rs)
            elif a.sub_spaces:
                sub = sub_space(rs)
                if len(sub.objectives) > min(a.budgets):
                    print(f"  scored on its completely recorded sub-space: {sub.n_valid} configurations ("
                          + ", ".join(f"{n}={p.values}" for n, p in sub.space.params.items()) + ")")
                    spaces.append(sub)
    rows: list[Score] = []
    t0 = time.time()
    for rs in spaces:
        if len(rs.objectives) <= min(a.budgets):
            print(f"{rs.name}: {len(rs.objectives)} configurations, not more than the budgets: not scored")
            continue
        rows += score_space(rs, a.strategies, a.budgets, a.repeats, a.batch)
        if a.early_stop:
            rows += score_space(rs, [s for s in a.strategies if s in ("auto", "tpe", "random")], a.budgets,
                                a.repeats, a.batch, a.early_stop)
        if a.kernel_tuner is not None:
            import tempfile
            with tempfile.TemporaryDirectory(prefix="kt-sim-") as tmp:
                rows += score_space_kt(rs, a.kernel_tuner or list(KT_STRATEGIES), a.budgets, a.repeats, Path(tmp))
    print(f"\nWillemsen et al. score against random search (mean over k = 1..budget; 1 = optimum, 0 = random); "
          f"{a.repeats} seeded repeats, batch {a.batch}, {time.time() - t0:.0f} s")
    print("dispatch: geomean over the size sets of the best time found there / the space's best time there "
          "(1.000 = a per-shape dispatch serves every size set at its optimum)")
    print(f"{'space':<60} {'strategy':<24} {'budget':>6} {'score':>7} {'±sd':>6} {'final':>7} {'optimum':>8} "
          f"{'dispatch':>8}")
    for r in rows:
        print(f"{r.space:<60} {r.strategy:<24} {r.budget:>6} {r.mean:7.3f} {r.stdev:6.3f} {r.final:7.3f} "
              f"{r.found_optimum:8.0%} {r.dispatch:8.3f}")
    by: dict[tuple[str, int], list[Score]] = {}
    for r in rows:
        by.setdefault((r.strategy, r.budget), []).append(r)
    print("\nmean over spaces:")
    for (s, b), rs_ in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        xs = [r.mean for r in rs_]
        ds = [r.dispatch for r in rs_ if math.isfinite(r.dispatch)]
        print(f"  budget {b:>3}  {s:<24} {sum(xs) / len(xs):7.3f}  median {statistics.median(xs):7.3f}  "
              f"({len(xs)} spaces)" + (f"  dispatch {sum(ds) / len(ds):6.3f} ({len(ds)} spaces)" if ds else ""))
    if a.json:
        a.json.write_text(json.dumps({"repeats": a.repeats, "batch": a.batch, "budgets": a.budgets,
                                      "scores": [r.__dict__ for r in rows]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
