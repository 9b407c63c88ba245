"""The GPU backend, parent side: worker processes, the watchdog, restarts after a crash, ncu profiles.

The parent never imports pycuda nor creates a CUDA context. Each worker is a ``multiprocessing`` spawn
process running ``gpu_worker.serve`` with a ``GpuWorker``; requests and replies are picklable dataclasses
over a Pipe. A request that makes no progress (no heartbeat) for ``watchdog_s`` kills the worker (TIMEOUT);
a worker that dies or reports a poisoned context is dropped (CRASHED) and the next request starts a fresh
one, which first re-runs the session's ``start(problem)`` setup with the same timing batches.
"""

from __future__ import annotations

import csv
import ctypes
import functools
import importlib.util
import io
import logging
import math
import multiprocessing as mp
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from agent_core.source import spec as spec_mod
from agent_core.measure.backend import Problem, Variant
from agent_core.measure.gpu_worker import GpuWorker, serve
from agent_core.measure.timeline import current as current_timeline
from agent_core.model import DeviceInfo, Evaluation, KerntuneError, Status, Timing

_log = logging.getLogger("kerntune.gpu")


# --------------------------------------------------------------------------------------------- availability
@functools.lru_cache(maxsize=1)
def gpu_available() -> tuple[bool, str]:
    """(True, device count) or (False, why not), without importing pycuda or creating a context."""
    if importlib.util.find_spec("pycuda") is None:
        return False, "pycuda is not installed (pip install 'kerntune[gpu]')"
    if shutil.which("nvcc") is None:
        return False, "nvcc is not on PATH (install the CUDA toolkit or add its bin/ to PATH)"
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False, "no NVIDIA driver (libcuda.so.1 cannot be loaded)"
    rc = lib.cuInit(0)
    if rc != 0:
        msg = ctypes.c_char_p()
        lib.cuGetErrorString(rc, ctypes.byref(msg))
        return False, f"the CUDA driver does not initialize: {(msg.value or b'').decode() or rc}"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return False, "no CUDA device"
    return True, f"{count.value} CUDA device(s)"


# --------------------------------------------------------------------------------------------- worker processes
class WorkerFailure(KerntuneError):
    """A request did not complete in the worker."""


class WorkerTimeout(WorkerFailure):
    """No progress within the watchdog; the worker was killed."""


class WorkerCrashed(WorkerFailure):
    """The worker died, or reported a CUDA error that poisoned its context, and was dropped."""


class WorkerError(WorkerFailure):
    """The request raised in the worker (which is still usable)."""


def _death(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class WorkerProcess:
    """One spawn process running ``serve(conn, factory, args)`` and its end of the pipe."""

    def __init__(self, factory: Callable, args: tuple = (), watchdog_s: float = 30.0, startup_s: float = 180.0):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.watchdog_s = watchdog_s
        self.parts: list = []  # the pieces of the current batch request received so far ("part" messages)
        self.last_phases: dict[str, float] = {}  # seconds per phase the worker reported for the last request
        self.proc = ctx.Process(target=serve, args=(child, factory, args), name="kerntune-gpu-worker", daemon=True)
        self.proc.start()
        child.close()
        msg = self._wait(startup_s, "starting the worker")
        if msg[0] == "init_error":
            self.stop()
            raise WorkerError(f"the GPU worker could not start: {msg[1]}")

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``op`` in the worker; raise WorkerTimeout / WorkerCrashed / WorkerError."""
        self.parts, self.last_phases = [], {}
        try:
            self.conn.send((op, args, kwargs))
        except (OSError, ValueError):
            self.kill()
            raise WorkerCrashed(f"the worker is gone ({_death(self.proc.exitcode)})") from None
        msg = self._wait(self.watchdog_s, op)
        self.last_phases = msg[3] if len(msg) > 3 and isinstance(msg[3], dict) else {}
        if msg[2]:  # the worker exits after this reply: its context is poisoned
            self.proc.join(10)
            self.kill()
            if msg[0] == "error":
                raise WorkerCrashed(msg[1])
        if msg[0] == "error":
            raise WorkerError(msg[1])
        return msg[1]

    def _wait(self, timeout: float, what: str) -> tuple:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerTimeout(f"no progress for {timeout:g} s while {what} (a kernel that never "
                                    "finishes?); the worker was stopped")
            ready = False
            try:
                ready = self.conn.poll(min(left, 0.5))
                msg = self.conn.recv() if ready else None
            except (EOFError, OSError):
                msg = None
                ready = True
            if msg is not None:
                if msg[0] in ("beat", "part"):
                    if msg[0] == "part":
                        self.parts.append(msg[1])
                        if len(msg) > 2 and isinstance(msg[2], dict):
                            self.last_phases = msg[2]  # what a request that dies later has spent so far
                    deadline = time.monotonic() + timeout
                    continue
                return msg
            if ready or not self.proc.is_alive():
                self.proc.join(5)
                code = self.proc.exitcode
                self.kill()
                raise WorkerCrashed(f"the worker process died while {what} ({_death(code)})")

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)
        self.conn.close()

    def stop(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(("stop", (), {}))
                self.proc.join(10)
            except (OSError, ValueError):
                pass
        self.kill()


class Supervisor:
    """Keeps one worker; starts a fresh one when needed and replays the remembered setup request on it."""

    def __init__(self, factory: Callable, args: tuple = (), watchdog_s: float = 30.0,
                 startup_s: float = 180.0, log: Callable[[str], None] | None = None):
        self.factory, self.args = factory, args
        self.watchdog_s, self.startup_s = watchdog_s, startup_s
        self.log = log or _log.info
        self.worker: WorkerProcess | None = None
        self.setup: tuple[str, tuple, dict] | None = None
        self.restarts = 0

    def set_watchdog(self, seconds: float) -> None:
        """The no-progress limit of the requests from now on (the running worker's and the next one's)."""
        self.watchdog_s = seconds
        if self.worker is not None:
            self.worker.watchdog_s = seconds

    def remember_setup(self, op: str | None, *args: Any, **kwargs: Any) -> None:
        """The request a fresh worker must run first (the current worker has already run it)."""
        self.setup = (op, args, kwargs) if op else None

    def call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        w = self._ensure()
        return w.call(op, *args, **kwargs)  # a dead worker stays here until _ensure replaces it

    @property
    def last_parts(self) -> list:
        """The pieces of the last batch request that arrived before it ended (also when it failed)."""
        return list(self.worker.parts) if self.worker is not None else []

    @property
    def last_phases(self) -> dict[str, float]:
        return dict(self.worker.last_phases) if self.worker is not None else {}

    def _ensure(self) -> WorkerProcess:
        if self.worker is not None and self.worker.alive:
            return self.worker
        if self.worker is not None:
            self.worker.kill()
            self.restarts += 1
            self.log(f"starting a fresh GPU worker (restart {self.restarts})")
        self.worker = None
        with current_timeline().phase("worker_start"):
            w = WorkerProcess(self.factory, self.args, self.watchdog_s, self.startup_s)
            if self.setup:
                op, a, kw = self.setup
                try:
                    w.call(op, *a, **kw)
                except WorkerFailure as e:
                    w.kill()
                    raise WorkerFailure(f"a fresh worker could not redo the session's setup: {e.message}") from None
        self.worker = w
        return w

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None


# --------------------------------------------------------------------------------------------- the backend
PROFILE_METRICS = ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                   "sm__warps_active.avg.pct_of_peak_sustained_active",
                   "launch__registers_per_thread", "gpu__time_duration.sum")


HANG_FLOOR_S = 8.0  # a variant's request with no progress this long is hung, however fast the original
HANG_FACTOR = 2000  # ... or this many times the original's slowest timed launch (a batch of them), if longer


def hang_limit(original: list[Timing], most_s: float) -> float:
    """The no-progress limit for the variants of a problem whose original took ``original``: a variant's request
    beats after every launch it times and every size set it verifies, so no progress for ``HANG_FACTOR`` times the
    original's slowest launch (at least ``HANG_FLOOR_S``) is a kernel that does not finish, found in seconds rather
    than the whole watchdog (``most_s``, which stays the limit where that is shorter)."""
    slowest_s = max((t.median_us * max(1, t.batch) for t in original), default=0.0) * 1e-6
    return min(most_s, max(HANG_FLOOR_S, HANG_FACTOR * slowest_s))


class GpuBackend:
    """``backend.Backend`` on a real GPU through pycuda, in worker processes (module docstring)."""

    name = "gpu"

    def __init__(self, device_index: int = 0, watchdog_s: float = 30.0, log: Callable[[str], None] | None = None):
        self.device_index = device_index
        self.watchdog_s = watchdog_s
        self.log = log or _log.info
        self.sup = Supervisor(GpuWorker, (device_index,), watchdog_s, max(180.0, watchdog_s), self.log)
        self._device: DeviceInfo | None = None
        self._bandwidth: float | None = None
        self.problem: Problem | None = None
        self.original: list[Timing] | None = None
        self.batches: list[int] | None = None
        self._counter = 0

    def __enter__(self) -> "GpuBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def restarts(self) -> int:
        return self.sup.restarts

    def device(self) -> DeviceInfo:
        if self._device is None:
            self._device = self._call_or_fail("device_info")
        return replace(self._device, copy_bandwidth_gbps=self._bandwidth)

    def arch_hint(self) -> str | None:
        """The device's architecture before its worker has started (hardware.probe_arch), or the worker's."""
        if self._device is not None:
            return self._device.arch
        from agent_core.measure.hardware import probe_arch
        return probe_arch(self.device_index)

    def measure_copy_bandwidth(self) -> float:
        self._bandwidth = float(self._call_or_fail("copy_bandwidth"))
        return self._bandwidth

    def _call(self, op: str, *args: Any) -> Any:
        """``op`` in the worker; its round trip is timed, and the phases the worker reports (verification,
        timing, ...) are moved out of the round trip into their own (agent_core.measure.timeline)."""
        tl = current_timeline()
        with tl.phase("worker_call"):
            try:
                return self.sup.call(op, *args)
            finally:
                for name, sec in self.sup.last_phases.items():
                    tl.attribute(name, sec)

    def _call_or_fail(self, op: str, *args: Any) -> Any:
        try:
            return self._call(op, *args)
        except WorkerFailure as e:
            raise KerntuneError(f"GPU worker: {e.message}") from None

    def start(self, problem: Problem, original: list[Timing] | None = None) -> list[Timing]:
        """Set up the problem in the worker; time the original unless ``original`` (its timings from earlier in
        the run, for this device, spec and original text) is given: then only inputs and reference outputs are
        made, with the batches of those timings, and ``original`` is returned."""
        if problem.reference is None:
            raise KerntuneError("the GPU backend needs the compiled original kernel (problem.reference)")
        self.sup.set_watchdog(self.watchdog_s)  # the whole limit while the problem is set up
        self.sup.remember_setup(None)
        self.problem, self.original, self.batches = None, None, None
        if original is not None:
            batches = [t.batch for t in original]
            if len(batches) != len(problem.spec.sizes):
                raise KerntuneError(f"{len(batches)} original timings for {len(problem.spec.sizes)} size sets")
            _, batches = self._call_or_fail("start", problem, batches, False, [t.median_us for t in original])
            timings = [replace(t) for t in original]
        else:
            timings, batches = self._call_or_fail("start", problem, None, True)
        self.problem, self.original, self.batches = problem, timings, batches
        self._counter = 0
        self.sup.remember_setup("start", problem, batches, False, [t.median_us for t in timings])
        self.sup.set_watchdog(hang_limit(timings, self.watchdog_s))
        return timings

    def _need_problem(self) -> Problem:
        if self.problem is None:
            raise KerntuneError("start(problem) must come before evaluating variants")
        return self.problem

    def _worker_eval(self, op: str, variant: Variant, *args: Any) -> Evaluation:
        """``op`` ("evaluate" or "check") in the worker; a hang or a crash is the variant's status."""
        self._need_problem()
        if variant.compiled is None:
            return Evaluation(params=dict(variant.params), status=Status.COMPILE_ERROR,
                              error="the GPU backend needs a compiled variant")
        self._counter += 1
        try:
            ev = self._call(op, replace(variant, meta={}), self._counter, *args)
        except WorkerTimeout as e:
            ev = Evaluation(params=dict(variant.params), status=Status.TIMEOUT, error=e.message)
        except WorkerCrashed as e:
            ev = Evaluation(params=dict(variant.params), status=Status.CRASHED, error=e.message)
        except WorkerFailure as e:
            raise KerntuneError(f"GPU worker: {e.message}") from None
        ev.resources = variant.compiled.resources
        return ev

    def check(self, variant: Variant, size_sets: list[int], scale: float = 1.0) -> Evaluation:
        return self._worker_eval("check", variant, list(size_sets), float(scale))

    def evaluate(self, variant: Variant) -> Evaluation:
        return self._scored(self._worker_eval("evaluate", variant))

    def _scored(self, ev: Evaluation) -> Evaluation:
        """Bandwidth and objective (against the original's timings) of a verified, timed evaluation."""
        problem = self._need_problem()
        if ev.status == Status.OK:
            ev.gbps = [spec_mod.bytes_moved(problem.spec, sizes) / (t.median_us * 1e3)
                       for sizes, t in zip(problem.spec.sizes, ev.timings)]
            ratios = [t.median_us / o.median_us for t, o in zip(ev.timings, self.original)]
            ev.objective = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        return ev

    def evaluate_many(self, variants: list[Variant], deadline: float | None = None) -> list[Evaluation]:
        """``evaluate`` for each variant, in as few worker requests as possible (one when nothing crashes). A
        variant that crashes or hangs the worker gets that status; the variants after it go to a fresh worker,
        unless ``deadline`` (``time.monotonic()``) has passed: those are left unmeasured (not returned), so that a
        batch of hanging variants cannot overrun a run's time budget by a hang limit each."""
        self._need_problem()
        out: list[Evaluation] = []
        todo = list(variants)
        while todo:
            if out and deadline is not None and time.monotonic() > deadline:
                break
            runnable = [v for v in todo if v.compiled is not None]
            if len(runnable) < len(todo) or len(todo) == 1:  # nothing to batch: one at a time
                v = todo.pop(0)
                out.append(self.evaluate(v))
                continue
            counters = list(range(self._counter + 1, self._counter + 1 + len(todo)))
            self._counter += len(todo)
            try:
                evs = self._call("evaluate_many", [replace(v, meta={}) for v in todo], counters)
                bad = None
            except (WorkerTimeout, WorkerCrashed) as e:
                evs = self.sup.last_parts
                bad = e
            except WorkerFailure as e:
                raise KerntuneError(f"GPU worker: {e.message}") from None
            for v, ev in zip(todo, evs):
                ev.resources = v.compiled.resources
                out.append(self._scored(ev))
            todo = todo[len(evs):]
            if bad is not None and todo:  # the variant running when the worker died or hung
                v = todo.pop(0)
                status = Status.TIMEOUT if isinstance(bad, WorkerTimeout) else Status.CRASHED
                out.append(Evaluation(params=dict(v.params), status=status, error=bad.message,
                                      resources=v.compiled.resources))
            elif bad is None and todo:  # the worker stopped after a crash it reported (its context poisoned)
                continue
        return out

    def confirm(self, variant: Variant, rounds: int = 5) -> tuple[list[Timing], list[Timing]]:
        self._need_problem()
        return self._call_or_fail("confirm", replace(variant, meta={}), rounds)

    def profile(self, variant: Variant, metrics: list[str] | None = None, size_index: int = 0,
                timeout_s: float = 300.0) -> dict:
        """ncu counters of one launch of ``variant`` (fresh inputs, size set ``size_index``):
        dram_pct, achieved_occupancy_pct, registers_per_thread, duration_us, stalls, top_stalls, metrics.
        {"error": why} when ncu is missing or fails."""
        with current_timeline().phase("ncu"):
            return self._profile(variant, metrics, size_index, timeout_s)

    def _profile(self, variant: Variant, metrics: list[str] | None, size_index: int, timeout_s: float) -> dict:
        problem = self._need_problem()
        ncu = shutil.which("ncu")
        if ncu is None:
            return {"error": "ncu (Nsight Compute) is not on PATH; install it to profile variants"}
        if variant.compiled is None:
            return {"error": "no compiled variant to profile"}
        with tempfile.TemporaryDirectory(prefix="kerntune-ncu-") as tmp:
            req = Path(tmp) / "request.pkl"
            with open(req, "wb") as f:
                pickle.dump((self.device_index, problem, replace(variant, meta={}), size_index), f)
            cmd = [ncu, "--csv", "--page", "raw", "--clock-control", "none", "--kernel-name-base", "mangled",
                   "--kernel-name", variant.compiled.symbol, "--launch-count", "1",
                   "--section", "WarpStateStats", "--metrics", ",".join(metrics or PROFILE_METRICS),
                   sys.executable, "-m", "agent_core.measure.gpu_worker", "profile", str(req)]
            env = dict(os.environ)
            root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
            except subprocess.TimeoutExpired:
                return {"error": f"ncu did not finish within {timeout_s:g} s"}
        prof = parse_ncu_csv(r.stdout)
        if not prof:
            tail = "\n".join((r.stdout + "\n" + r.stderr).strip().splitlines()[-6:])
            return {"error": f"ncu gave no metrics (exit status {r.returncode}): {tail}"}
        return prof

    def release(self) -> None:
        """Back to how a fresh backend is, the worker kept: the problem's buffers freed in the worker (where one is
        running; none is started for it), the problem and the setup a fresh worker would redo forgotten. The next
        run calls ``start`` on it and pays no worker start (the language server keeps one warm between runs)."""
        self.sup.remember_setup(None)
        self.problem, self.original, self.batches = None, None, None
        w = self.sup.worker
        if w is not None and w.alive:
            try:
                w.call("release")
            except WorkerFailure as e:
                self.log(f"the GPU worker did not release its buffers ({e.message}); stopping it")
                self.sup.close()

    @property
    def warm(self) -> bool:
        """Whether a worker (its process and CUDA context) is running."""
        return self.sup.worker is not None and self.sup.worker.alive

    def close(self) -> None:
        self.sup.close()


def parse_ncu_csv(text: str) -> dict:
    """The first kernel row of ``ncu --csv --page raw`` output -> profile dict (see GpuBackend.profile)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(rows) < 3:
        return {}
    names, units, values = rows[0], rows[1], rows[2]
    metrics: dict[str, float] = {}
    for n, u, v in zip(names, units, values):
        try:
            x = float(v.replace(",", ""))
        except ValueError:
            continue
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
                 "second": 1e6, "s": 1e6}.get(u.strip())
        if scale is not None:
            n, x = n + ".us", x * scale
        metrics[n] = x
    out: dict[str, Any] = {"metrics": metrics}
    for key, name in (("dram_pct", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                      ("achieved_occupancy_pct", "sm__warps_active.avg.pct_of_peak_sustained_active"),
                      ("registers_per_thread", "launch__registers_per_thread"),
                      ("duration_us", "gpu__time_duration.sum.us")):
        if name in metrics:
            out[key] = metrics[name]
    groups: dict[str, dict[str, float]] = {}  # metric suffix -> stall reason -> value
    for n, x in metrics.items():
        m = re.search(r"issue_stalled_([a-z0-9_]+?)(_per_warp_active\.pct|_per_issue_active\.ratio|\.ratio|\.pct)$", n)
        if m and not m.group(1).endswith("not_issued"):
            groups.setdefault(m.group(2), {})[m.group(1)] = x
    stalls = next((groups[k] for k in ("_per_warp_active.pct", "_per_issue_active.ratio", ".ratio", ".pct")
                   if k in groups), {})
    if stalls:
        out["stalls"] = stalls
        out["top_stalls"] = [k for k, _ in sorted(stalls.items(), key=lambda kv: -kv[1])]
    return out
