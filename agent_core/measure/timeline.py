"""Where a run's time goes: wall-clock phase timers over one ``optimize``, ``tune`` or bench kernel.

A ``Timeline`` is activated for a run (``run_scope``); code anywhere in the run opens ``phase(NAME)`` around
what it does (the compiler, the GPU backend, the tuner, the loop). Phases nest: a phase's own time is its
duration less the phases opened inside it, so on the thread that drives the run every second is counted
once and the phases add up to at most the wall time; the rest is shown as ``other``. Work on other threads
(nvcc compiling the next batch while the GPU measures this one) is kept apart as ``overlapped``: it is not
part of the sum. A GPU worker reports, per request, how long it verified and timed (``attribute``): that time
moves from the enclosing phase (the request's round trip) to those phases.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

# phase name -> what the table calls it, in the order the table lists them
PHASES = {
    "prepare": "parse, templatize, spec",
    "templates": "template proposals",
    "worker_start": "GPU worker start",
    "copy_bandwidth": "copy bandwidth",
    "original": "original: inputs, reference, timing",
    "compile": "compile (nvcc + ptxas)",
    "verify": "verification",
    "time": "timing",
    "worker_call": "worker round trips (load, IPC)",
    "confirm": "confirmation (interleaved)",
    "ncu": "ncu profile",
    "strategy": "search strategy (ask/tell)",
    "store": "results store",
    "plan": "analysis and planning",
    "dispatch": "per-shape dispatch (choice)",
}


@dataclass
class _Frame:
    name: str
    start: float
    inner: float = 0.0  # seconds of the phases opened (or attributed) inside this one


@dataclass
class Timeline:
    """Phase timers of one run (module docstring). Safe to use from several threads."""

    started: float = field(default_factory=time.monotonic)
    seconds: dict[str, float] = field(default_factory=dict)  # own time per phase, on the driving thread
    counts: dict[str, int] = field(default_factory=dict)
    overlapped: dict[str, float] = field(default_factory=dict)  # phases run on other threads
    # events counted on any thread, with the seconds each took (how each variant was compiled: by NVRTC, by
    # nvcc and why, from the cache; a compile process started): {name: {"n", "s", "max_s"}}
    tallies: dict[str, dict] = field(default_factory=dict)
    finished: float | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._owner = threading.get_ident()
        self._stacks: dict[int, list[_Frame]] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (its own time: less the phases opened inside it)."""
        tid = threading.get_ident()
        with self._lock:
            stack = self._stacks.setdefault(tid, [])
            frame = _Frame(name, time.monotonic())
            stack.append(frame)
        try:
            yield
        finally:
            with self._lock:
                d = time.monotonic() - frame.start
                stack.pop()
                if stack:
                    stack[-1].inner += d
                self._add(tid, name, max(0.0, d - frame.inner))

    def attribute(self, name: str, seconds: float, count: int = 0) -> None:
        """Move ``seconds`` of the enclosing phase to phase ``name`` (what a GPU worker reports it spent)."""
        if seconds <= 0:
            return
        tid = threading.get_ident()
        with self._lock:
            stack = self._stacks.get(tid) or []
            if stack:
                stack[-1].inner += seconds
            self._add(tid, name, seconds, count)

    def tally(self, name: str, seconds: float = 0.0) -> None:
        """Count one event ``name`` that took ``seconds`` (on whatever thread; not part of the phases' sum)."""
        with self._lock:
            _count(self.tallies, name, 1, seconds, seconds)

    def _add(self, tid: int, name: str, seconds: float, count: int = 1) -> None:
        if tid == self._owner:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds
            self.counts[name] = self.counts.get(name, 0) + count
        else:
            self.overlapped[name] = self.overlapped.get(name, 0.0) + seconds

    def finish(self) -> None:
        if self.finished is None:
            self.finished = time.monotonic()

    def wall_s(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def report(self) -> dict:
        """{"wall_s", "phases": [{"phase", "label", "s", "n", "pct"}...] (other last), "overlapped": {...},
        "tallies": {name: {"n", "s", "max_s"}}}: the phases plus "other" sum to the wall time."""
        with self._lock:
            wall = self.wall_s()
            names = [n for n in PHASES if n in self.seconds] + sorted(n for n in self.seconds if n not in PHASES)
            rows = [{"phase": n, "label": PHASES.get(n, n), "s": self.seconds[n], "n": self.counts.get(n, 0)}
                    for n in names]
            other = max(0.0, wall - sum(r["s"] for r in rows))
            rows.append({"phase": "other", "label": "other (unattributed)", "s": other, "n": 0})
            for r in rows:
                r["pct"] = 100.0 * r["s"] / wall if wall > 0 else 0.0
            tallies = {k: dict(v) for k, v in sorted(self.tallies.items())}
            return {"wall_s": wall, "phases": rows, "overlapped": dict(self.overlapped), "tallies": tallies}


def merge_reports(reports: list[dict]) -> dict:
    """The sum of several reports (the kernels of a bench run), in the same form."""
    wall = sum(r.get("wall_s", 0.0) for r in reports)
    by: dict[str, dict] = {}
    over: dict[str, float] = {}
    tallies: dict[str, dict] = {}
    for rep in reports:
        for k, v in (rep.get("tallies") or {}).items():
            _count(tallies, k, v["n"], v["s"], v["max_s"])
        for row in rep.get("phases", []):
            d = by.setdefault(row["phase"], {"phase": row["phase"], "label": row["label"], "s": 0.0, "n": 0})
            d["s"] += row["s"]
            d["n"] += row.get("n", 0)
        for k, v in (rep.get("overlapped") or {}).items():
            over[k] = over.get(k, 0.0) + v
    order = list(PHASES) + ["other"]
    rows = sorted(by.values(), key=lambda r: (order.index(r["phase"]) if r["phase"] in order else len(order) - 1,
                                              r["phase"]))
    rows = [r for r in rows if r["phase"] != "other"] + [r for r in rows if r["phase"] == "other"]
    for r in rows:
        r["pct"] = 100.0 * r["s"] / wall if wall > 0 else 0.0
    return {"wall_s": wall, "phases": rows, "overlapped": over, "tallies": dict(sorted(tallies.items()))}


def _count(tallies: dict[str, dict], name: str, n: int, seconds: float, longest: float) -> None:
    """Add ``n`` events of ``seconds`` in all, the longest ``longest``, to the tally ``name``."""
    t = tallies.setdefault(name, {"n": 0, "s": 0.0, "max_s": 0.0})
    t["n"] += n
    t["s"] += seconds
    t["max_s"] = max(t["max_s"], longest)


def render_tallies(tallies: dict) -> str:
    """``name N (S s, longest L s), ...`` for a report's tallies ("" when none)."""
    return ", ".join(f"{k} {v['n']}" + (f" ({v['s']:.2f} s, longest {v['max_s']:.2f} s)" if v["s"] >= 0.005 else "")
                     for k, v in tallies.items())


def render(report: dict, title: str = "where the time went") -> str:
    """The report as a short plain-text table (phases under 0.05 s are left out, ``other`` always shown)."""
    lines = [f"{title}: {report['wall_s']:.1f} s wall"]
    for r in report["phases"]:
        if r["s"] < 0.05 and r["phase"] != "other":
            continue
        n = f"  ({r['n']}x)" if r.get("n") and r["phase"] not in ("other",) else ""
        lines.append(f"  {r['label']:<38} {r['s']:8.1f} s  {r['pct']:5.1f}%{n}")
    over = {k: v for k, v in (report.get("overlapped") or {}).items() if v >= 0.05}
    if over:
        lines.append("  overlapped with the above (other threads, not in the sum): "
                     + ", ".join(f"{PHASES.get(k, k)} {v:.1f} s" for k, v in sorted(over.items())))
    if report.get("tallies"):
        lines.append("  compiles: " + render_tallies(report["tallies"]))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- the active run
_current: contextvars.ContextVar = contextvars.ContextVar("kerntune_timeline", default=None)


class _Off:
    """Phase timers that record nothing: outside a run."""

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    def attribute(self, name: str, seconds: float, count: int = 0) -> None:
        pass

    def tally(self, name: str, seconds: float = 0.0) -> None:
        pass


_OFF = _Off()


class _TalliesOnly(_Off):
    """A run's tallies without its phases: a pool thread's compiles counted, their time not summed again (the
    thread that waits for the pool times the wait)."""

    def __init__(self, tl: Timeline):
        self._tl = tl

    def tally(self, name: str, seconds: float = 0.0) -> None:
        self._tl.tally(name, seconds)


def current() -> Timeline | _Off:
    """The active run's timeline, or timers that record nothing."""
    return _current.get() or _OFF


def phase(name: str):
    """``current().phase(name)``."""
    return current().phase(name)


def tally(name: str, seconds: float = 0.0) -> None:
    """``current().tally(name, seconds)``."""
    current().tally(name, seconds)


@contextlib.contextmanager
def run_scope() -> Iterator[tuple[Timeline, bool]]:
    """(the active timeline, False) inside a run; else a new one, active for the block, and True: the caller
    owns the run and reports it. The owner's timeline is finished when the block ends."""
    tl = _current.get()
    if tl is not None:
        yield tl, False
        return
    tl = Timeline()
    token = _current.set(tl)
    try:
        yield tl, True
    finally:
        tl.finish()
        _current.reset(token)


def bind(tl: Timeline | None):
    """Make ``tl`` the active timeline in another thread (contextvars do not follow a thread pool); returns the
    token for ``unbind``."""
    return _current.set(tl)


def bind_tallies(tl: "Timeline | _Off"):
    """Make the tallies (not the phases) of ``tl`` active in another thread; returns the token for ``unbind``."""
    if isinstance(tl, _TalliesOnly):
        return _current.set(tl)
    return _current.set(_TalliesOnly(tl) if isinstance(tl, Timeline) else None)


def unbind(token) -> None:
    _current.reset(token)
