"""`kerntune bench`: run the optimize loop on every benchmark kernel and report the suite.

For each kernel (every ``bench/*.cu`` kernel with a tuning spec by default) the offline agent
(``agent.optimize``) tunes it round after round; the runner collects, per kernel and per size set, the
original and tuned times (the confirmed, interleaved figures of the winning round), speedups, achieved
bandwidth against the device's copy bandwidth, the winning template and parameters, evaluation counts,
wall time and the time to reach within 5% of the final best. It checks the targets of issue #4 and writes
``bench_results.json``, ``bench_results.md`` (rewritten after every kernel) and ``bench_plot.png``.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import click

from agent_core.model import KerntuneError, NoGpuError, TuningSpec, to_plain
from agent_core.search.strategies import STRATEGIES as STRATEGY_NAMES

SCHEMA = "kerntune-bench/1"
RESULTS_JSON = "bench_results.json"
RESULTS_MD = "bench_results.md"
PLOT_PNG = "bench_plot.png"

GEOMEAN_TARGET = 2.0  # geometric-mean speedup over the suite (per-kernel geomeans)
BW_TARGET_PCT = 80.0  # % of copy bandwidth every large memory-bound shape must reach
BW_TARGET_MIN_BYTES = 64_000_000  # "moves >= 64 MB" (decimal, like GB/s)
TIME_TARGET_S = 120.0  # within 5% of the final best in under 2 minutes
WITHIN = 0.05
MEMORY_BOUND_INTENSITY = 10.0  # flops per byte below which a shape counts as memory-bound

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"


# --------------------------------------------------------------------------------------------- kernels
@dataclass
class BenchKernel:
    path: str  # absolute path of the .cu file
    kernel: str
    spec: TuningSpec
    label: str | None = None  # the name in the results: the kernel's, or FILE_STEM:KERNEL where files share it

    @property
    def name(self) -> str:
        return self.label or self.kernel

    @property
    def stem(self) -> str:
        return Path(self.path).stem


def _resolve_file(arg: str, bench_dir: Path) -> list[Path]:
    p = Path(arg)
    if p.is_dir():  # a folder named on the command line: every .cu file under it (bench/corpus: one folder a family)
        return sorted(p.rglob("*.cu"))
    if p.is_file():
        return [p]
    for cand in (bench_dir / arg, bench_dir / f"{arg}.cu"):
        if cand.is_file():
            return [cand]
    raise KerntuneError(f"no benchmark file '{arg}': give a .cu file, a folder of them, or the name of a file "
                        f"in {bench_dir} (e.g. rms_norm)")


def discover(args: list[str] | None = None, only: list[str] | None = None,
             bench_dir: str | Path | None = None) -> list[BenchKernel]:
    """The kernels with a tuning spec in ``args`` (files, folders or names of ``bench/`` files; default: every
    ``bench/*.cu``), keeping those whose kernel name or file stem is in ``only`` when given."""
    from agent_core.source import spec as spec_mod
    from agent_core.source.cuda_parse import parse_cuda
    from agent_core.search.tuner import read_source

    bdir = Path(bench_dir) if bench_dir else (BENCH_DIR if BENCH_DIR.is_dir() else Path("bench"))
    files: list[Path] = []
    if args:
        for a in args:
            files += _resolve_file(a, bdir)
    else:
        if not bdir.is_dir():
            raise KerntuneError(f"no benchmark folder at {bdir}: pass the .cu files to benchmark")
        files = sorted(bdir.glob("*.cu"))
    out: list[BenchKernel] = []
    seen = set()
    for f in files:
        path = str(f.resolve())
        cf = parse_cuda(read_source(path), path)
        for k in cf.kernels:
            if (path, k.name) in seen:
                continue
            spec = spec_mod.find_spec(cf, k.name)
            if spec is None:
                continue
            if only and k.name not in only and f.stem not in only:
                continue
            seen.add((path, k.name))
            out.append(BenchKernel(path, k.name, spec))
    shared = {bk.kernel for bk in out if sum(o.kernel == bk.kernel for o in out) > 1}
    for bk in out:  # kernels of the same name in several files (a corpus of styles) are told apart by file
        if bk.kernel in shared:
            bk.label = f"{bk.stem}:{bk.kernel}"
    if not out:
        what = f" matching --only {', '.join(only)}" if only else ""
        raise KerntuneError(f"no kernel with a tuning spec{what} in {', '.join(str(f) for f in files) or bdir}")
    return out


# --------------------------------------------------------------------------------------------- arithmetic
def geomean(xs: list[float]) -> float | None:
    """Geometric mean of positive numbers; None for an empty list."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def time_to_within(points: list[tuple[float, float | None]], within: float = WITHIN) -> tuple[float | None,
                                                                                               float | None]:
    """(seconds, final best objective) for a timeline of (seconds since the start, objective or None) of
    evaluations in the order they were recorded: the time of the first verified evaluation whose objective
    (time / original time, lower is better) is at most (1 + within) x the lowest objective of all of them."""
    ok = [(t, o) for t, o in points if o is not None and math.isfinite(o) and o > 0]
    if not ok:
        return None, None
    best = min(o for _, o in ok)
    for t, o in ok:
        if o <= best * (1 + within):
            return t, best
    return None, best  # unreachable: the best itself qualifies


def _shape_label(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _memory_bound(spec: TuningSpec, sizes: dict, nbytes: int) -> bool:
    if not spec.flops:
        return True
    from agent_core import expr
    try:
        flops = float(expr.evaluate(spec.flops, sizes))
    except Exception:
        return True
    return nbytes <= 0 or flops / nbytes < MEMORY_BOUND_INTENSITY


# --------------------------------------------------------------------------------------------- one kernel
def kernel_record(bk: BenchKernel, result, timeline: list[tuple[float, float | None]], wall_s: float,
                  status: str = "") -> dict:
    """The bench record of one kernel from the optimize loop's result (agent.AgentResult)."""
    rounds = []
    counts = {"ok": 0, "failed": 0, "pruned": 0, "measured": 0, "reused": 0}
    for r in result.rounds:
        s = r.summary
        c = s.get("counts") or {}
        for k in counts:
            counts[k] += int(c.get(k, 0) or 0)
        rounds.append({"index": r.index, "origin": r.template.origin, "action": r.step.action,
                       "reason": r.step.reason, "speedup": s.get("speedup"), "confirmed": bool(s.get("confirmed")),
                       "best_params": s.get("best_params"), "counts": c, "wall_s": s.get("wall_s"),
                       "session_id": s.get("session_id"), "status": s.get("status"),
                       "analysis": r.analysis.text})
    best = result.best
    src = best.summary if best else (result.rounds[0].summary if result.rounds else None)
    d = getattr(result, "dispatch", None)
    t5, best_obj = time_to_within(timeline)
    shapes = []
    sizes = bk.spec.sizes
    if src:
        n = len(src.get("sizes") or sizes)
        orig = src.get("original_us") or [None] * n
        tuned = (src.get("best_us") if best else None) or [None] * n
        ogbps = src.get("original_gbps") or [None] * n
        opct = src.get("original_pct_copy") or [None] * n
        nbytes = src.get("bytes") or [None] * n
        bw = src.get("copy_bw_gbps")
        for i, sz in enumerate(src.get("sizes") or sizes):
            single = orig[i] / tuned[i] if orig[i] and tuned[i] else None
            o, t, entry, kept = orig[i], tuned[i], None, False
            if d is not None:  # what the rewrite runs on this size set: the dispatch's configuration for it (or the
                # original kernel, where no configuration is faster beyond the measured noise)
                o, t, entry = d.original_us[i], d.tuned_us[i], d.serve[i]
                kept = d.entries[entry].is_original
            g = nbytes[i] / (t * 1e3) if nbytes[i] and t else None
            shapes.append({"sizes": sz, "label": _shape_label(sz), "bytes": nbytes[i],
                           "memory_bound": _memory_bound(bk.spec, sz, nbytes[i] or 0),
                           "original_us": o, "tuned_us": t, "speedup": o / t if o and t else None,
                           "gbps": g, "pct_copy": g / bw * 100 if g and bw else None,
                           "original_gbps": ogbps[i], "original_pct_copy": opct[i],
                           "single_original_us": orig[i], "single_us": tuned[i], "single_speedup": single,
                           "entry": entry, "original_kept": kept})
    if not status:
        status = "ok" if best else "no_variant"
    return {
        "name": bk.name, "file": bk.path, "kernel": bk.kernel, "status": status, "error": "",
        "speedup": geomean([s["speedup"] for s in shapes]) if best else None,
        "single_speedup": geomean([s["single_speedup"] for s in shapes]) if best else None,
        "dispatch": d.to_dict() if d is not None else None,
        "confirmed": bool(best and best.summary.get("confirmed")),
        "origin": best.template.origin if best else None,
        "params": best.summary.get("best_params") if best else None,
        "original_params": src.get("original_params") if src else None,
        "template_hash": best.summary.get("template_hash") if best else None,
        "copy_bw_gbps": src.get("copy_bw_gbps") if src else None,
        "device": src.get("device") if src else None,
        "shapes": shapes, "counts": counts, "rounds": rounds,
        "final_step": ({"action": result.final_step.action, "reason": result.final_step.reason}
                       if result.final_step else None),
        "wall_s": wall_s, "time_to_5pct_s": t5, "best_objective": best_obj,
        "timeline": [[round(t, 4), o] for t, o in timeline],
        "time_breakdown": getattr(result, "timeline", None),
    }


def error_record(bk: BenchKernel, message: str, wall_s: float, status: str = "error") -> dict:
    return {"name": bk.name, "file": bk.path, "kernel": bk.kernel, "status": status, "error": message,
            "speedup": None, "single_speedup": None, "dispatch": None, "confirmed": False, "origin": None, "params": None, "original_params": None,
            "template_hash": None, "copy_bw_gbps": None, "device": None, "shapes": [],
            "counts": {"ok": 0, "failed": 0, "pruned": 0, "measured": 0, "reused": 0}, "rounds": [],
            "final_step": None, "wall_s": wall_s, "time_to_5pct_s": None, "best_objective": None, "timeline": [],
            "time_breakdown": None}


# --------------------------------------------------------------------------------------------- suite
def _suite_speedup(k: dict) -> float | None:
    """A kernel's speedup for the suite: its geomean, or 1.0 when no variant verified (the original stays)."""
    if k["status"] in ("ok", "interrupted") and k.get("speedup"):
        return k["speedup"]
    if k["status"] == "no_variant":
        return 1.0
    return None


def suite_summary(kernels: list[dict]) -> dict:
    """Geometric means over kernels (each kernel's geomean over its shapes) and over all (kernel, shape)
    pairs. Kernels with no verified variant count as 1.00x; kernels that did not finish are left out."""
    per_kernel, single, pairs, counted, left_out = [], [], [], [], []
    for k in kernels:
        sp = _suite_speedup(k)
        if sp is None:
            left_out.append(k["name"])
            continue
        counted.append(k["name"])
        per_kernel.append(sp)
        single.append(k.get("single_speedup") or sp)
        if k["status"] == "no_variant":
            pairs += [1.0] * max(1, len(k["shapes"]))
        else:
            pairs += [s["speedup"] if s.get("speedup") else 1.0 for s in k["shapes"]]
    return {"geomean_over_kernels": geomean(per_kernel), "geomean_over_shapes": geomean(pairs),
            "geomean_one_configuration": geomean(single),
            "kernels_with_dispatch": [k["name"] for k in kernels if k.get("dispatch") and k["name"] in counted],
            "kernels_counted": counted, "kernels_left_out": left_out, "n_kernels": len(per_kernel),
            "n_shapes": len(pairs)}


def check_targets(kernels: list[dict], suite: dict, planned: int | None = None) -> dict:
    """The targets of issue #4 against the results so far."""
    g = suite.get("geomean_over_kernels")
    bw_checked, bw_failing = [], []
    for k in kernels:
        for s in k["shapes"]:
            if not s.get("memory_bound") or (s.get("bytes") or 0) < BW_TARGET_MIN_BYTES:
                continue
            item = {"kernel": k["name"], "shape": s["label"], "bytes": s["bytes"], "pct_copy": s.get("pct_copy")}
            bw_checked.append(item)
            if s.get("pct_copy") is None or s["pct_copy"] < BW_TARGET_PCT:
                bw_failing.append(item)
    t_failing, t_checked = [], []
    for k in kernels:
        if k["status"] in ("error", "not_run"):
            continue
        t = k.get("time_to_5pct_s")
        t_checked.append({"kernel": k["name"], "time_to_5pct_s": t})
        if t is None or t >= TIME_TARGET_S:
            t_failing.append({"kernel": k["name"], "time_to_5pct_s": t})
    finished = [k for k in kernels if k["status"] in ("ok", "no_variant")]
    complete = len(finished) == len(kernels) and (planned is None or len(kernels) >= planned)
    return {
        "complete": complete,
        "geomean": {"target": GEOMEAN_TARGET, "value": g, "met": g is not None and g >= GEOMEAN_TARGET},
        "bandwidth": {"target_pct": BW_TARGET_PCT, "min_bytes": BW_TARGET_MIN_BYTES, "checked": bw_checked,
                      "failing": bw_failing, "met": bool(bw_checked) and not bw_failing},
        "time_to_5pct": {"target_s": TIME_TARGET_S, "within": WITHIN, "checked": t_checked,
                         "failing": t_failing, "met": bool(t_checked) and not t_failing},
    }


# --------------------------------------------------------------------------------------------- output
def _f(x, fmt: str, dash: str = "-") -> str:
    return dash if x is None else format(x, fmt)


def _x(x) -> str:
    """A speedup: ``1.57x``, or ``-`` where there is none."""
    return "-" if x is None else f"{x:.2f}x"


def _mark(ok: bool, complete: bool = True) -> str:
    """A target's verdict; on an incomplete run a target can only be met so far (the suite decides)."""
    return ("met" if complete else "met so far") if ok else "NOT met"


def _runner_lines(doc: dict) -> list[str]:
    """Where the kernels ran (a Dask runner: workers, kernels redone after a lost worker) and, when they were
    tuned on several device models, which kernel on which (each figure is its device's)."""
    r = doc.get("runner") or {}
    out = []
    if r.get("kind") == "dask":
        redone = [f"{k['name']} ({len(k['attempts'])} attempts)" for k in doc["kernels"]
                  if len(k.get("attempts") or []) > 1]
        out.append(f"- runner: Dask, {r.get('workers')} GPU worker(s)"
                   + (f" on the scheduler at {r['scheduler']}" if r.get("scheduler") not in (None, "local") else
                      f", local cluster (CUDA_VISIBLE_DEVICES {', '.join(r.get('gpus') or [])})")
                   + (f"; redone after a lost worker: {', '.join(redone)}" if redone else ""))
    devices: dict[str, list[str]] = {}
    for k in doc["kernels"]:
        if k.get("device"):
            devices.setdefault(k["device"], []).append(k["name"])
    if len(devices) > 1:
        out.append("- kernels tuned on several device models: " + "; ".join(
            f"{d}: {', '.join(names)}" for d, names in devices.items()))
    return out


def render_markdown(doc: dict) -> str:
    """The human-readable report: tables, suite geomeans, targets and definitions."""
    dev = doc.get("device") or {}
    bw = doc.get("copy_bw_gbps")
    L = ["# kerntune bench results", ""]
    status = doc.get("status")
    if status != "finished":
        L += [f"**Status: {status}** — {len(doc['kernels'])} of {doc.get('planned', '?')} kernels reported"
              + (" (the run was interrupted; what was measured is kept)." if status == "interrupted" else "."), ""]
    L += [f"- device: {dev.get('name', '?')} ({dev.get('arch', '?')}), copy bandwidth "
          f"{_f(bw, '.0f')} GB/s (device-to-device, bytes read + written)",
          f"- backend: {doc.get('backend')}" + (" — figures replayed from a recorded store, wall times are "
                                                "those of the replay, not of tuning on a GPU"
                                                if str(doc.get('backend', '')).startswith('replay') else ""),
          *_runner_lines(doc),
          f"- command: `{doc.get('command')}`",
          f"- commit: {doc.get('git_commit') or 'unknown'}" + (" (with uncommitted changes)"
                                                              if doc.get("git_dirty") else ""),
          f"- started {doc.get('started_at_iso', '')}, options: " + ", ".join(
              f"{k}={v}" for k, v in (doc.get("options") or {}).items()), ""]
    L += ["## Per shape", "",
          "| kernel | shape | MB moved | original µs | tuned µs | speedup | GB/s | % copy bw | original % | "
          "one configuration | entry |",
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k in doc["kernels"]:
        for s in k["shapes"]:
            entry = s.get("entry")
            L.append(f"| {k['name']} | {s['label']} | {_f(s['bytes'] and s['bytes'] / 1e6, '.1f')} | "
                     f"{_f(s['original_us'], '.1f')} | {_f(s['tuned_us'], '.1f')} | {_x(s['speedup'])} | "
                     f"{_f(s['gbps'], '.0f')} | {_f(s['pct_copy'], '.0f')}% | {_f(s['original_pct_copy'], '.0f')}% | "
                     f"{_x(s.get('single_speedup'))} | {'-' if entry is None else f'#{entry + 1}'}"
                     + (" original kept" if s.get("original_kept") else "") + " |")
        if not k["shapes"]:
            L.append(f"| {k['name']} | - | | | | | | | {k['status']} | | |")
    L += ["", "## Per kernel", "",
          "| kernel | status | speedup (geomean over shapes) | one configuration | template | parameters | "
          "evaluations ok / failed / pruned | rounds | wall s | to 5% of best s |",
          "| --- | --- | ---: | ---: | --- | --- | --- | ---: | ---: | ---: |"]
    for k in doc["kernels"]:
        c = k["counts"]
        params = ", ".join(f"{a}={b}" for a, b in (k.get("params") or {}).items()) or "-"
        st = k["status"] + ("" if k.get("confirmed") or k["status"] != "ok" else " (search figures)")
        n = len((k.get("dispatch") or {}).get("entries") or [])
        kept = sum(1 for x in k["shapes"] if x.get("original_kept"))
        L.append(f"| {k['name']} | {st} | {_x(k['speedup'])}"
                 + (" (original kept on every shape)" if kept and kept == len(k["shapes"]) else
                    (f" (dispatch of {n}" + (f", original kept on {kept}" if kept else "") + ")") if n else "")
                 + f" | {_x(k.get('single_speedup'))} | "
                 f"{k.get('origin') or '-'} | {params} | {c['ok']} / {c['failed']} / {c['pruned']} | "
                 f"{len(k['rounds'])} | {_f(k['wall_s'], '.1f')} | {_f(k['time_to_5pct_s'], '.1f')} |")
    errs = [k for k in doc["kernels"] if k.get("error")]
    if errs:
        L += [""] + [f"- {k['name']}: {k['status']}: {k['error']}" for k in errs]
    disp = [k for k in doc["kernels"] if k.get("dispatch")]
    if disp:
        from agent_core.agent.dispatch import Dispatch, condition_words
        L += ["", "## Per-shape dispatch", "",
              "Where another verified configuration serves some size sets at least "
              "5% faster than the single winner (and still at least 1% faster when confirmed interleaved with "
              "the original), the tuned rewrite holds one kernel per configuration and chooses at each launch; "
              "entry #1 is the default. A shape where no verified configuration is faster than the original "
              "beyond the measured noise keeps the original kernel (\"original kept\").", ""]
        for k in disp:
            dd = Dispatch.from_dict(k["dispatch"])
            L.append(f"- {k['name']}: " + ("the original kernel kept on every shape (nothing applied); "
                                             f"{dd.single_speedup:.2f}x for one configuration" if dd.applies_nothing
                                             else f"{dd.speedup:.2f}x against {dd.single_speedup:.2f}x for one "
                                                  "configuration"))
            for i, e in enumerate(dd.entries):
                L.append(f"  - #{i + 1}: {condition_words(dd, i)} → " + (
                    "the original kernel, unchanged" if e.is_original else
                    ", ".join(f"{a}={b}" for a, b in e.params.items()) + f" ({e.origin})"))
            for why in dd.dropped:
                L.append(f"  - kept on the winner after confirmation: {why}")
            for why in dd.kept:
                L.append(f"  - original kept: {why}")
            if dd.instead:
                what = "one configuration" if len(dd.entries) == 1 else "this dispatch"
                L.append(f"  - {what} instead of the winner: {dd.instead}")
    s, t = doc["suite"], doc["targets"]
    L += ["", "## Suite", "",
          f"- geometric-mean speedup over kernels (each kernel's geomean over its shapes, each kernel counted once): "
          f"**{_x(s['geomean_over_kernels'])}** ({s['n_kernels']} kernels)",
          f"- the same with one configuration per kernel (no per-shape dispatch): "
          f"{_x(s.get('geomean_one_configuration'))}",
          f"- geometric-mean speedup over all (kernel, shape) pairs: **{_x(s['geomean_over_shapes'])}** "
          f"({s['n_shapes']} pairs)",
          "- a kernel with no verified variant counts as 1.00x (its original stays); "
          + (f"left out (did not finish): {', '.join(s['kernels_left_out'])}" if s["kernels_left_out"]
             else "no kernel left out"), "",
          "## Targets (issue #4)", ""]
    if not t["complete"]:
        L += ["_Incomplete run: the targets below are judged on the kernels reported so far._", ""]
    g = t["geomean"]
    L.append(f"- geometric-mean speedup over kernels ≥ {g['target']:.1f}x: {_x(g['value'])} — "
             f"**{_mark(g['met'], t['complete'])}**")
    b = t["bandwidth"]
    L.append(f"- every memory-bound shape moving ≥ {b['min_bytes'] / 1e6:.0f} MB at ≥ {b['target_pct']:.0f}% of "
             f"copy bandwidth: {len(b['checked']) - len(b['failing'])} of {len(b['checked'])} shapes — "
             f"**{_mark(b['met'], t['complete'])}**")
    for it in b["failing"]:
        L.append(f"  - {it['kernel']} {it['shape']}: {_f(it['pct_copy'], '.0f')}% ({it['bytes'] / 1e6:.0f} MB)")
    tt = t["time_to_5pct"]
    L.append(f"- each kernel within {tt['within'] * 100:.0f}% of its final best in < {tt['target_s']:.0f} s: "
             f"{len(tt['checked']) - len(tt['failing'])} of {len(tt['checked'])} kernels — "
             f"**{_mark(tt['met'], t['complete'])}**")
    for it in tt["failing"]:
        L.append(f"  - {it['kernel']}: {_f(it['time_to_5pct_s'], '.1f', 'never (no verified variant)')} s")
    tb = doc.get("time_breakdown")
    if tb:
        from agent_core.measure.timeline import PHASES, render_tallies
        L += ["", "## Where the time went", "",
              f"Wall time of the optimize loops, summed over the kernels: {tb['wall_s']:.0f} s "
              "(each phase's own time on the thread that drives the run; \"other\" is what no phase claims).", "",
              "| phase | s | % | " + " | ".join(k["name"] for k in doc["kernels"] if k.get("time_breakdown")) + " |",
              "| --- | ---: | ---: | " + " | ".join("---:" for k in doc["kernels"] if k.get("time_breakdown")) + " |"]
        for row in tb["phases"]:
            per = []
            for k in doc["kernels"]:
                if k.get("time_breakdown"):
                    got = next((r["s"] for r in k["time_breakdown"]["phases"] if r["phase"] == row["phase"]), 0.0)
                    per.append(f"{got:.1f}")
            L.append(f"| {row['label']} | {row['s']:.1f} | {row['pct']:.0f}% | " + " | ".join(per) + " |")
        over = tb.get("overlapped") or {}
        if any(v >= 0.05 for v in over.values()):
            L += ["", "Overlapped (other threads, not in the sum): "
                  + ", ".join(f"{PHASES.get(n, n)} {v:.1f} s" for n, v in sorted(over.items()))]
        if tb.get("tallies"):
            L += ["", "Compiles (how each was served, its seconds): " + render_tallies(tb["tallies"])]
    L += ["", "## Definitions", "",
          "- original µs / tuned µs: median times of the original kernel and of what the tuned rewrite runs on "
          "that shape (the winning variant, or the per-shape dispatch's configuration for it, entry #N), timed "
          "interleaved in the same process after the search (the confirmation); \"(search figures)\" marks a "
          "kernel whose confirmation did not run. Speedup = original / tuned per shape; a kernel's speedup is "
          "the geometric mean over its shapes. \"one configuration\": the same for the single winner on every "
          "shape.",
          "- original kept: no verified configuration beats the original on that shape by more than the measured "
          "noise (1%, or half the original's plus half the configuration's interquartile range, relative, where "
          "that is wider), so the rewrite runs the original kernel there, unchanged: its speedup is 1.00x; every "
          "other shape was faster than that margin in the confirmation that decided it.",
          "- GB/s: the bytes the kernel must move for that shape (the spec's `bytes`, default every input read "
          "once and every output written once) over the tuned time; % copy bw is that against the device's "
          "measured device-to-device copy bandwidth.",
          f"- memory-bound: the spec gives no `flops`, or fewer than {MEMORY_BOUND_INTENSITY:.0f} flops per byte "
          "moved (every kernel of this suite).",
          "- template: where the winning variant came from (`structural`: the user's kernel with its own "
          "tunables; `expert:NAME`: an expert template bound to the kernel's signature), parameters: its "
          "configuration. Evaluations are summed over all rounds of the optimize loop (ok: verified and timed; "
          "failed: compile, verification, crash, timeout or launch errors; pruned: rejected by constraints or "
          "hardware limits before running).",
          "- wall s: the whole optimize loop for the kernel (parsing, expert binding, compiling, measuring, "
          "confirming every round).",
          f"- to 5% of best: the final best is the lowest search objective (geometric mean over shapes of variant "
          f"time / original time) of all verified evaluations of all rounds; the figure is the time, from the start "
          f"of the optimize loop, at which the first evaluation within {WITHIN * 100:.0f}% of it (objective ≤ "
          f"{1 + WITHIN:.2f} × final best) was recorded. Each evaluation is timestamped when the tuner records it "
          "(written to the store and reported); evaluations reused from the store count at the moment they are "
          "reused. The original is timed once per kernel (the first round) and every round's objectives are "
          "relative to those timings; the confirmation times it again, interleaved.", ""]
    if doc.get("plot"):
        L += [f"Plot: `{Path(doc['plot']).name}`", ""]
    elif doc.get("plot_note"):
        L += [f"Plot: {doc['plot_note']}", ""]
    return "\n".join(L)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def suite_time_breakdown(kernels: list[dict]) -> dict | None:
    """Where the suite's time went: the kernels' breakdowns summed (None when no kernel has one)."""
    from agent_core.measure.timeline import merge_reports
    reps = [k["time_breakdown"] for k in kernels if k.get("time_breakdown")]
    return merge_reports(reps) if reps else None


def write_results(doc: dict, out_dir: str | Path) -> tuple[Path, Path]:
    """Write (atomically) DIR/bench_results.json and DIR/bench_results.md from ``doc``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc["time_breakdown"] = suite_time_breakdown(doc["kernels"])
    doc["suite"] = suite_summary(doc["kernels"])
    doc["targets"] = check_targets(doc["kernels"], doc["suite"], doc.get("planned"))
    j, m = out / RESULTS_JSON, out / RESULTS_MD
    _atomic_write(j, json.dumps(to_plain(doc), indent=1) + "\n")
    _atomic_write(m, render_markdown(doc))
    return j, m


def have_matplotlib() -> bool:
    import importlib.util
    return importlib.util.find_spec("matplotlib") is not None


def plot_results(doc: dict, png: str | Path) -> Path:
    """Draw speedup and % of copy bandwidth per kernel and shape. KerntuneError without matplotlib."""
    if not have_matplotlib():
        raise KerntuneError("matplotlib is not installed here: install it (pip install 'kerntune[bench]') or "
                            f"draw the plot elsewhere with `kerntune bench --plot-only {RESULTS_JSON}`")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, speed, pct, opct, colors = [], [], [], [], []
    palette = plt.get_cmap("tab10")
    for i, k in enumerate(doc["kernels"]):
        for s in k["shapes"]:
            short = k["name"].removesuffix("_kernel")
            labels.append(f"{short} " + "×".join(str(v) for v in (s.get("sizes") or {}).values()))
            speed.append(s.get("speedup") or 0.0)
            pct.append(s.get("pct_copy") or 0.0)
            opct.append(s.get("original_pct_copy") or 0.0)
            colors.append(palette(i % 10))
    n = max(1, len(labels))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(8.0, 0.3 * n + 2), 8), sharex=True)
    x = list(range(len(labels)))
    ax1.bar(x, speed, color=colors)
    ax1.axhline(1.0, color="black", linewidth=0.8)
    ax1.axhline(GEOMEAN_TARGET, color="tab:red", linestyle="--", linewidth=0.8,
                label=f"target geomean {GEOMEAN_TARGET:.1f}x")
    g = (doc.get("suite") or {}).get("geomean_over_kernels")
    ax1.set_ylabel("speedup over the original (x)")
    ax1.set_title(f"kerntune bench on {(doc.get('device') or {}).get('name', '?')}"
                  + (f" — geomean over kernels {g:.2f}x" if g else ""))
    ax1.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    w = 0.4
    ax2.bar([i - w / 2 for i in x], opct, width=w, color="lightgray", label="original")
    ax2.bar([i + w / 2 for i in x], pct, width=w, color=colors, label="tuned")
    ax2.axhline(BW_TARGET_PCT, color="tab:red", linestyle="--", linewidth=0.8, label=f"{BW_TARGET_PCT:.0f}% target")
    ax2.set_ylabel("% of copy bandwidth")
    ax2.set_ylim(0, max([100.0] + [p * 1.05 for p in pct + opct]))
    ax2.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax2.set_xticks(x)
    ax2.set_xticklabels(labels, rotation=75, fontsize=7, ha="right")
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


# --------------------------------------------------------------------------------------------- runner
@dataclass
class BenchOptions:
    budget_per_round: int = 40
    rounds: int = 4
    strategy: str = "auto"
    seed: int = 0
    use_experts: bool = True
    dispatch: bool = True
    early_stop_after: int | None = 25  # agent_core.search.tuner.EARLY_STOP_AFTER (None: never)
    time_budget_s: float | None = None  # per kernel: its whole optimize run


def git_info(where: str | Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding ``where``; (None, None) outside one."""
    try:
        cwd = str(Path(where).resolve())
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None, None
        st = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                            capture_output=True, text=True, timeout=20)
        return head.stdout.strip(), bool(st.stdout.strip()) if st.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None, None


def new_document(kernels: list[BenchKernel], backend_name: str, options: BenchOptions, command: str) -> dict:
    commit, dirty = git_info(Path(kernels[0].path).parent if kernels else ".")
    now = time.time()
    return {"schema": SCHEMA, "status": "running", "started_at": now,
            "started_at_iso": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(now)), "finished_at": None,
            "command": command, "git_commit": commit, "git_dirty": dirty, "backend": backend_name,
            "options": to_plain(options), "planned": len(kernels),
            "planned_kernels": [{"name": k.name, "file": k.path} for k in kernels],
            "device": None, "copy_bw_gbps": None, "kernels": [], "plot": None, "plot_note": None}


def run_bench(kernels: list[BenchKernel], backend, store, out_dir: str | Path, options: BenchOptions | None = None,
              command: str = "kerntune bench", backend_name: str | None = None,
              on_event: Callable | None = None, on_kernel: Callable[[dict], None] | None = None,
              cancel: threading.Event | None = None, plot: bool = True, resume: bool = False,
              suite: list[BenchKernel] | None = None, runner=None) -> dict:
    """Tune each kernel with agent.optimize through ``backend`` into ``store`` (or through ``runner``, an
    agent_core.runners runner writing into ``store``: then ``backend`` is unused); write the results to
    ``out_dir`` after every kernel. ``cancel`` stops between evaluations: the current kernel is reported as
    interrupted and the rest as not run. ``resume``: kernels that finished in the results file already in
    ``out_dir`` (an earlier, cut-off run with the same options) keep their records and are not run again.
    ``suite``: every kernel of the suite the targets are judged over (``kernels`` is a part of it under --only);
    those neither run now nor kept from the earlier run are reported as not run, so a part is never judged as
    the whole. Returns the results document."""
    from agent_core.runners import LocalRunner

    options = options or BenchOptions()
    cancel = cancel or threading.Event()
    name = backend_name or getattr(backend, "name", "?")
    runner = runner or LocalRunner(backend, store)
    doc = new_document(kernels, name, options, command)
    doc["runner"] = runner.describe()
    done = finished_records(out_dir, options) if resume else {}
    names = {bk.name for bk in kernels}
    for name, rec in done.items():  # kernels of the earlier run that this one (--only) does not name
        if name not in names:
            doc["kernels"].append(rec)
    for bk in kernels:
        if bk.name in done:
            doc["kernels"].append(done[bk.name])
            if not doc["device"] and done[bk.name].get("device"):
                dev = store.get_device(done[bk.name]["device"])
                doc["device"] = to_plain(dev) if dev else {"name": done[bk.name]["device"]}
            doc["copy_bw_gbps"] = doc["copy_bw_gbps"] or done[bk.name].get("copy_bw_gbps")
    if done:
        doc["resumed"] = sorted(done)
    left = [bk for bk in (suite or []) if bk.name not in names and bk.name not in done]
    doc["planned"] = len(names | set(done) | {bk.name for bk in left})
    doc["planned_kernels"] += [{"name": bk.name, "file": bk.path} for bk in left]
    write_results(doc, out_dir)
    try:
        _run_kernels(doc, [k for k in kernels if k.name not in done], runner, store, out_dir, options, on_event,
                     on_kernel, cancel)
        for bk in left:  # the suite's kernels this run (--only) does not name and no earlier run finished
            doc["kernels"].append(error_record(bk, "not run: not named by --only and not finished by an earlier "
                                               "run in this folder", 0.0, "not_run"))
    except BaseException:  # a hard stop (second Ctrl-C, a crash): keep what was measured, say it stopped
        doc["status"] = "interrupted"
        write_results(doc, out_dir)
        raise
    doc["status"] = "interrupted" if cancel.is_set() else "finished"
    doc["finished_at"] = time.time()
    if plot:
        if have_matplotlib():
            doc["plot"] = str(plot_results(_with_suite(doc), Path(out_dir) / PLOT_PNG))
        else:
            doc["plot_note"] = ("not drawn: matplotlib is not installed here; draw it on a machine that has it "
                                f"with `kerntune bench --plot-only {Path(out_dir) / RESULTS_JSON}`")
    write_results(doc, out_dir)
    return doc


def _run_kernels(doc, kernels, runner, store, out_dir, options, on_event, on_kernel, cancel) -> None:
    """Each kernel is one unit of the runner (in process, or a Dask worker's: agent_core.runners); its record is
    written as its outcome arrives, its rows already in the store."""
    from agent_core.agent.loop import AgentOptions
    from agent_core.runners import SessionUnit

    aopt = AgentOptions(budget_per_round=options.budget_per_round, max_rounds=options.rounds,
                        strategy=options.strategy, seed=options.seed, use_experts=options.use_experts,
                        dispatch=options.dispatch,
                        early_stop_after=options.early_stop_after, time_budget_s=options.time_budget_s)
    by_key = {bk.name: bk for bk in kernels}
    units = [SessionUnit(bk.name, bk.path, bk.kernel, aopt) for bk in kernels]
    for out in runner.run(units, (lambda u, ev: on_event(by_key[u.key], ev)) if on_event else None, cancel):
        bk = by_key[out.key]
        if out.error_kind == "no_gpu":
            raise NoGpuError(out.error)
        if out.error_kind == "not_run":
            rec = error_record(bk, "not run: the bench was interrupted", 0.0, "not_run")
        elif out.error:
            rec = error_record(bk, out.error, out.wall_s)
        else:
            rec = kernel_record(bk, out.result, out.timeline, out.wall_s, "interrupted" if out.cancelled else "")
        if len(out.attempts) > 1 or out.attempts[:1] and out.attempts[0].worker != "local":
            rec["attempts"] = [to_plain(a) for a in out.attempts]
        doc["kernels"].append(rec)
        if rec.get("device") and not doc["device"]:
            dev = store.get_device(rec["device"])
            doc["device"] = to_plain(dev) if dev else {"name": rec["device"]}
        if rec.get("copy_bw_gbps") and not doc["copy_bw_gbps"]:
            doc["copy_bw_gbps"] = rec["copy_bw_gbps"]
        write_results(doc, out_dir)
        if on_kernel:
            on_kernel(rec)
    order = {bk.name: i for i, bk in enumerate(kernels)}  # as planned, whatever order they finished in
    doc["kernels"].sort(key=lambda k: order.get(k["name"], -1))


def finished_records(out_dir: str | Path, options: BenchOptions) -> dict[str, dict]:
    """Kernel records of an earlier run in ``out_dir`` that finished (ok or no verified variant), by name; an
    earlier run with other options is not resumed from (its figures would not be comparable)."""
    p = Path(out_dir) / RESULTS_JSON
    if not p.is_file():
        return {}
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    if doc.get("schema") != SCHEMA:
        return {}
    if doc.get("options") != to_plain(options):
        raise KerntuneError(f"{p} was written with other options ({doc.get('options')}); resume with the same "
                            "options or write to another --out")
    return {k["name"]: k for k in doc.get("kernels", []) if k.get("status") in ("ok", "no_variant")}


def _with_suite(doc: dict) -> dict:
    doc["suite"] = suite_summary(doc["kernels"])
    return doc


def plot_only(results_json: str | Path, png: str | Path | None = None) -> Path:
    """Draw the plot of a results file (written by `kerntune bench`), beside it unless ``png`` is given."""
    p = Path(results_json)
    if not p.is_file():
        raise KerntuneError(f"no results file at {p} (written by `kerntune bench` as {RESULTS_JSON})")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise KerntuneError(f"not a bench results file: {e.msg}", str(p), e.lineno - 1, e.colno - 1) from None
    if doc.get("schema") != SCHEMA or not isinstance(doc.get("kernels"), list):
        raise KerntuneError(f"not a bench results file (expected schema {SCHEMA}, found {doc.get('schema')!r})",
                            str(p))
    return plot_results(_with_suite(doc), png or p.with_name(PLOT_PNG))


# --------------------------------------------------------------------------------------------- command
def _command_line(kernels, budget, rounds, strategy, seed, backend, out, store_path, only, no_experts,
                  no_dispatch=False, early_stop=None, time_budget=None, gpus=None, scheduler=None) -> str:
    parts = ["kerntune", "bench", *kernels, "--budget", str(budget), "--rounds", str(rounds),
             "--strategy", strategy, "--seed", str(seed), "--out", str(out)]
    if early_stop is not None:
        parts += ["--early-stop", str(early_stop)]
    if time_budget is not None:
        parts += ["--time-budget", f"{time_budget:g}"]
    if backend:
        parts += ["--backend", backend]
    if store_path:
        parts += ["--store", str(store_path)]
    for o in only:
        parts += ["--only", o]
    if no_experts:
        parts.append("--no-experts")
    if no_dispatch:
        parts.append("--no-dispatch")
    if gpus is not None:
        parts += ["--gpus", str(gpus)]
    if scheduler is not None:
        parts += ["--scheduler", scheduler]
    return shlex.join(parts)


@click.command("bench")
@click.argument("kernels", nargs=-1)
@click.option("--budget", default=40, show_default=True, help="evaluations per round")
@click.option("--rounds", default=4, show_default=True, help="most rounds (templates tried) per kernel")
@click.option("--strategy", type=click.Choice(list(STRATEGY_NAMES)), default="auto",
              show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--backend", default=None, help="auto | gpu | replay:PATH (default $KERNTUNE_BACKEND or auto)")
@click.option("--out", "out_dir", default="bench/results", show_default=True, type=click.Path(file_okay=False),
              help="where bench_results.json/.md and bench_plot.png go")
@click.option("--store", "store_path", default=None, help="results store (default OUT/results.sqlite)")
@click.option("--only", multiple=True, help="only this kernel (kernel name or file stem); repeatable")
@click.option("--no-experts", is_flag=True, help="only templates of your own kernel (structural, and its semantic rewrite)")
@click.option("--no-dispatch", is_flag=True, help="one configuration per kernel (no per-shape dispatch)")
@click.option("--early-stop", type=click.IntRange(min=0), default=None, metavar="N",
              help="end a round's search when its best has not improved by more than 1% for N evaluations "
                   "(0: never) [default: 25]")
@click.option("--time-budget", type=float, default=None, help="seconds per kernel (its whole optimize run)")
@click.option("--resume", is_flag=True, help="keep the kernels that finished in OUT's results file; run the rest")
@click.option("--gpus", default=None, metavar="all|N",
              help="spread the kernels over a local Dask cluster, one worker per GPU (default: in this process)")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="spread the kernels over the GPU workers of an existing Dask scheduler")
@click.option("--plot-only", "plot_json", default=None, type=click.Path(dir_okay=False),
              help="draw the plot of an existing bench_results.json and exit")
def bench_command(kernels, budget, rounds, strategy, seed, backend, out_dir, store_path, only, no_experts, no_dispatch,
                  early_stop, time_budget, resume, gpus, scheduler, plot_json):
    """Tune every benchmark kernel (default: bench/*.cu) and write the suite's table, targets and plot."""
    from rich.console import Console
    from rich.markup import escape

    err = Console(stderr=True, highlight=False)

    def fail(e: Exception, code: int):
        err.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
        sys.exit(code)

    try:
        if plot_json:
            png = plot_only(plot_json)
            click.echo(f"plot: {png}")
            return
        _bench(err, kernels, budget, rounds, strategy, seed, backend, out_dir, store_path, only, no_experts, resume,
               no_dispatch, early_stop, time_budget, gpus, scheduler)
    except NoGpuError as e:
        fail(e, 3)
    except KerntuneError as e:
        fail(e, 2)


def _bench(err, kernels, budget, rounds, strategy, seed, backend, out_dir, store_path, only, no_experts,
           resume=False, no_dispatch=False, early_stop=None, time_budget=None, gpus=None, scheduler=None):
    from agent_core.runners import LocalRunner, make_runner
    from agent_core.store import Store
    from agent_core.search.tuner import open_backend

    todo = discover(list(kernels) or None, list(only) or None)
    suite = discover(list(kernels) or None) if only else todo  # the targets are judged over the whole suite
    out = Path(out_dir)
    if gpus is None and scheduler is None:
        be = open_backend(backend)  # NoGpuError without a GPU (unless replay)
        store = Store(store_path or out / "results.sqlite")
        runner = LocalRunner(be, store, close_backend=True)
    else:
        store = Store(store_path or out / "results.sqlite")
        try:
            runner = make_runner(store, backend, gpus, scheduler)
        except BaseException:
            store.close()
            raise
        be = None
        d = runner.describe()
        err.print(f"Dask runner: {d['workers']} GPU worker(s)"
                  + (f" on the scheduler at {scheduler}" if scheduler else f" (CUDA_VISIBLE_DEVICES "
                                                                         f"{', '.join(d['gpus'])})"),
                  soft_wrap=True, markup=False)
    cancel = threading.Event()

    def on_sigint(*_):
        if cancel.is_set():
            raise KeyboardInterrupt
        err.print("[yellow]interrupt: finishing after the current evaluation (Ctrl-C again to stop now)[/]")
        cancel.set()

    def on_event(bk, ev):
        if ev.kind in ("status", "original", "best"):
            err.print(f"{bk.name}: {ev.message}", style="dim", soft_wrap=True, markup=False)

    def on_kernel(rec):
        sp = f"{rec['speedup']:.2f}x" if rec.get("speedup") else rec["status"]
        kept = sum(1 for x in rec.get("shapes") or [] if x.get("original_kept"))
        if rec.get("dispatch") and kept == len(rec.get("shapes") or []):
            sp += f" (the original kernel kept on every shape; one configuration {rec['single_speedup']:.2f}x)"
        elif rec.get("dispatch"):
            sp += (f" (per-shape dispatch of {len(rec['dispatch']['entries'])}"
                   + (f", the original kept on {kept} shape(s)" if kept else "")
                   + f"; one configuration {rec['single_speedup']:.2f}x)")
        t5 = rec.get("time_to_5pct_s")
        err.print(f"{rec['name']}: {sp}  ({rec.get('origin') or '-'}, {rec['wall_s']:.0f} s"
                  + (f", within 5% of best after {t5:.0f} s" if t5 is not None else "") + ")"
                  + (f"  {rec['error']}" if rec.get("error") else ""), style="bold", soft_wrap=True, markup=False)
        tb = rec.get("time_breakdown")
        if tb:
            top = sorted(tb["phases"], key=lambda r: -r["s"])[:5]
            err.print(f"{rec['name']}: time: " + ", ".join(f"{r['label']} {r['s']:.0f} s" for r in top),
                      style="dim", soft_wrap=True, markup=False)

    previous = signal.signal(signal.SIGINT, on_sigint) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        err.print(f"benchmarking {len(todo)} kernels: " + ", ".join(k.name for k in todo), soft_wrap=True,
                  markup=False)
        bopt = BenchOptions(budget, rounds, strategy, seed, not no_experts, not no_dispatch, time_budget_s=time_budget)
        if early_stop is not None:
            bopt.early_stop_after = early_stop or None
        doc = run_bench(todo, be, store, out, bopt,
                        _command_line(kernels, budget, rounds, strategy, seed, backend, out_dir, store_path, only,
                                      no_experts, no_dispatch, early_stop, time_budget, gpus, scheduler),
                        backend_name=backend or getattr(be, "name", "gpu"), on_event=on_event,
                        on_kernel=on_kernel, cancel=cancel, resume=resume, suite=suite, runner=runner)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        runner.close()
        store.close()
    s, t = doc["suite"], doc["targets"]
    click.echo(f"geomean speedup: {_x(s['geomean_over_kernels'])} over {s['n_kernels']} kernels, "
               f"{_x(s['geomean_over_shapes'])} over {s['n_shapes']} (kernel, shape) pairs; "
               f"{_x(s.get('geomean_one_configuration'))} with one configuration per kernel")
    done = t["complete"]
    click.echo(f"targets: geomean {_mark(t['geomean']['met'], done)}, bandwidth {_mark(t['bandwidth']['met'], done)}"
               f" ({len(t['bandwidth']['failing'])} shapes below {BW_TARGET_PCT:.0f}%), time to 5% "
               f"{_mark(t['time_to_5pct']['met'], done)}" + ("" if done else "  (incomplete run)"))
    if doc.get("time_breakdown"):
        from agent_core.measure.timeline import render
        click.echo(render(doc["time_breakdown"], "where the time went (all kernels)"))
    click.echo(f"results: {out / RESULTS_JSON}, {out / RESULTS_MD}"
               + (f", {doc['plot']}" if doc.get("plot") else ""))
    if doc.get("plot_note"):
        err.print(doc["plot_note"], soft_wrap=True, markup=False)
    if doc["status"] == "interrupted":
        sys.exit(130)
