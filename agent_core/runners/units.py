"""The unit of work a runner runs: one tuning session, i.e. the optimize loop on one kernel of one file.

A unit carries what the session needs (the file's path and its text at submission, the kernel, the loop's
options) and nothing bound to a process, so it can be pickled to a Dask worker on another host. Running it
(``run_session``) never raises for a kernel's own failure: the outcome says what went wrong, so one kernel's
error costs neither the rest of the run nor a retry of a deterministic failure.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from agent_core.model import KerntuneError, NoGpuError

if TYPE_CHECKING:
    from agent_core.agent.loop import AgentOptions, AgentResult
    from agent_core.measure.backend import Backend
    from agent_core.search.tuner import TuneEvent
    from agent_core.store import Store


@dataclass
class SessionUnit:
    key: str  # unique in a run: what events and outcomes are reported under (the kernel's name, or FILE:KERNEL)
    path: str  # the .cu file, resolved; workers on other hosts need the source tree at this path (read only)
    kernel: str
    options: "AgentOptions"
    text: str | None = None  # the file's text at submission (None: read it when the unit runs)

    @classmethod
    def of(cls, path: str | Path, kernel: str, options: "AgentOptions", key: str | None = None) -> "SessionUnit":
        from agent_core.search.tuner import read_source
        p = str(Path(path).resolve())
        return cls(key or kernel, p, kernel, options, read_source(p))


@dataclass
class Attempt:
    worker: str  # "local" in process, else the Dask worker's address
    pid: int
    gpu: str | None = None  # CUDA_VISIBLE_DEVICES of the worker


@dataclass
class SessionOutcome:
    key: str
    path: str
    kernel: str
    result: "AgentResult | None" = None
    error: str = ""
    error_kind: str = ""  # "" | "kerntune" | "no_gpu" | "exception" | "lost" | "not_run"
    cancelled: bool = False
    timeline: list[tuple[float, float | None]] = field(default_factory=list)  # (s since start, objective | None)
    wall_s: float = 0.0
    device: str | None = None  # the device the session measured on (its name, as the store keys it)
    attempts: list[Attempt] = field(default_factory=list)  # where it ran; more than one: redone after a loss

    @property
    def ok(self) -> bool:
        return self.result is not None and not self.error


def run_session(unit: SessionUnit, backend: "Backend", store: "Store",
                on_event: Callable[["TuneEvent"], None] | None = None,
                cancel: threading.Event | None = None) -> SessionOutcome:
    """Run the optimize loop of ``unit`` through ``backend`` into ``store``. The timeline holds every
    evaluation's time since the start and objective (None when it did not verify)."""
    from agent_core.agent.loop import optimize

    cancel = cancel or threading.Event()
    out = SessionOutcome(unit.key, unit.path, unit.kernel)
    t0 = time.time()

    def events(ev: "TuneEvent") -> None:
        if ev.kind == "evaluation" and ev.evaluation is not None:
            e = ev.evaluation
            out.timeline.append((time.time() - t0, e.objective if e.ok else None))
        if on_event:
            on_event(ev)

    try:
        out.result = optimize(unit.path, unit.kernel, backend, store, unit.options, on_event=events, cancel=cancel,
                              text=unit.text)
        best = out.result.best or (out.result.rounds[0] if out.result.rounds else None)
        out.device = best.summary.get("device") if best else None
    except NoGpuError as e:
        out.error, out.error_kind = str(e), "no_gpu"
    except KerntuneError as e:
        out.error, out.error_kind = str(e), "kerntune"
    except Exception as e:  # one kernel's failure must not cost the rest of a long GPU run
        out.error, out.error_kind = f"{type(e).__name__}: {e}", "exception"
    out.cancelled = cancel.is_set()
    out.wall_s = time.time() - t0
    if not out.attempts:
        out.attempts.append(Attempt("local", os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES")))
    return out


def renumber_sessions(outcome: SessionOutcome, ids: dict[int, int]) -> None:
    """After a merge (``Store.merge_rows``): the session ids the outcome's summaries name, as the store numbers
    them."""
    if outcome.result is None or not ids:
        return
    for r in outcome.result.rounds:
        sid = r.summary.get("session_id")
        if sid in ids:
            r.summary["session_id"] = ids[sid]
