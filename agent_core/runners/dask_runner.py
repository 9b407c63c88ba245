"""The Dask distributed runner: tuning sessions spread over GPUs, one Dask worker per GPU.

**Cluster.** Either a local one made on demand (``gpus``: "all" or a number): one scheduler and one worker
process per GPU, each started by a nanny with ``CUDA_VISIBLE_DEVICES`` set to its own GPU, one thread, and the
resource ``GPU=1``; or an existing scheduler (``scheduler="tcp://host:8786"``) whose workers were started one
per GPU the same way::

    CUDA_VISIBLE_DEVICES=0 DASK_DISTRIBUTED__WORKER__DAEMON=False \\
        dask worker tcp://host:8786 --nthreads 1 --resources GPU=1

(a worker must not be a daemon process: the GPU backend runs every candidate in a child process of its own).
Every unit asks for ``GPU=1``, so two units never share a GPU; a worker keeps its backend (and so its GPU
worker process) from one unit to the next.

**One writer.** A worker never writes the workspace's store. Each unit runs against a scratch copy of it on the
worker's own disk: a snapshot of the store taken when the run starts (so the session reuses what was measured
before, exactly as in process), compressed, in the unit's own arguments (the scheduler keeps those, so a unit
can be redone even when every worker died; data scattered to workers would die with them). When the unit ends
the worker returns the rows the session added, and the client, the one process that owns the store, merges them in one transaction as each
unit arrives (``Store.merge_rows``: session ids renumbered). SQLite is thus written by one process, never
over a network file system, and the store never holds half a session.

**A lost worker** (killed, crashed, its host gone) loses only the unit it was running: its rows died with its
scratch store, and the scheduler gives the unit to another worker (or to the same GPU's worker once its nanny
has restarted it), up to ``distributed.scheduler.allowed-failures`` times (default 3). The outcome lists every
attempt, so a redone unit can be seen.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import tempfile
import threading
import time
import uuid
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from agent_core.model import KerntuneError, NoGpuError
from agent_core.runners.units import Attempt, SessionOutcome, SessionUnit, renumber_sessions, run_session

if TYPE_CHECKING:
    from agent_core.search.tuner import TuneEvent
    from agent_core.store import Store

TOPIC = "kerntune-runner"
_log = logging.getLogger(__name__)


def _require_dask():
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
    except ImportError:
        raise KerntuneError("the Dask runner (--gpus, --scheduler) needs Dask distributed: "
                            "pip install 'kerntune[dist]' (or 'dask[distributed]')") from None


def resolve_backend(backend: str | None) -> str:
    """The backend every worker opens, spelt out on the client: $KERNTUNE_BACKEND or auto by default, a replay
    recording's path made absolute."""
    kind = backend or os.environ.get("KERNTUNE_BACKEND") or "auto"
    if kind.startswith("replay"):
        path = kind.split(":", 1)[1] if ":" in kind else ""
        if not path:
            raise KerntuneError("the replay backend needs a recorded store: replay:/path/to/results.sqlite")
        if not Path(path).is_file():
            raise KerntuneError(f"no recorded store at {path}")
        return "replay:" + str(Path(path).resolve())
    if kind not in ("auto", "gpu"):
        raise KerntuneError(f"unknown backend '{kind}' (use auto, gpu or replay:PATH)")
    return kind


def local_gpus(gpus: str | int, backend: str) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` of each local worker: the GPUs this process sees ("all"), or the first N.
    Over the replay backend nothing runs on a GPU: N workers, each given a label."""
    want = str(gpus).strip().lower()
    if backend.startswith("replay"):
        if want == "all":
            raise KerntuneError("--gpus all counts this machine's GPUs; the replay backend uses none: "
                                "give the number of workers (--gpus 2)")
        n = _count(want)
        return [str(i) for i in range(n)]
    from agent_core.measure.gpu_backend import gpu_available
    ok, why = gpu_available()
    if not ok:
        raise NoGpuError(f"no CUDA device available: {why}")
    count = int(why.split()[0])
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    visible = visible[:count] if visible else [str(i) for i in range(count)]
    if want == "all":
        return visible
    n = _count(want)
    if n > len(visible):
        raise KerntuneError(f"--gpus {n}: this machine shows {len(visible)} GPU(s)")
    return visible[:n]


def _count(want: str) -> int:
    try:
        n = int(want)
    except ValueError:
        n = 0
    if n < 1:
        raise KerntuneError(f"--gpus takes 'all' or a number of GPUs (at least 1), not {want!r}")
    return n


def local_cluster(devices: list[str]):
    """A Dask cluster on this host: a scheduler on the loopback interface and one worker per entry of
    ``devices`` (its ``CUDA_VISIBLE_DEVICES``), each under a nanny that restarts it when it dies."""
    from distributed import Nanny, Scheduler, SpecCluster

    quiet = logging.ERROR
    workers = {f"gpu{d}": {"cls": Nanny, "options": {
        "nthreads": 1, "resources": {"GPU": 1}, "env": {"CUDA_VISIBLE_DEVICES": d}, "host": "127.0.0.1",
        "memory_limit": 0,  # a tuning session is small; the GPU's own memory is the GPU backend's business
        "silence_logs": quiet}} for d in devices}
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard": False, "dashboard_address": ":0"}}
    return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=quiet, name="kerntune")


# --------------------------------------------------------------------------------------------- worker side
_BACKENDS: dict = {}  # per worker process: the backend of each spec, kept from one unit to the next
_DEVICES: dict = {}  # per worker process: the devices (copy bandwidth included) its units recorded


def _worker_backend(spec: str):
    be = _BACKENDS.get(spec)
    if be is None:
        from agent_core.search.tuner import open_backend
        if not spec.startswith("replay") and mp.current_process().daemon:
            raise KerntuneError("this Dask worker is a daemon process, which cannot start the GPU backend's worker "
                                "processes: start it with DASK_DISTRIBUTED__WORKER__DAEMON=False")
        be = _BACKENDS[spec] = open_backend(spec)
    return be


def remote_session(unit: SessionUnit, backend: str, snapshot: bytes, cancel_name: str,
                   run_id: str) -> tuple[SessionOutcome, dict[str, list[dict]]]:
    """Runs on a Dask worker: the unit against a scratch copy of the store (``snapshot``: zlib-compressed
    ``Store.snapshot``); (outcome, the rows it added)."""
    from distributed import Event, get_worker

    from agent_core.store import Store

    w = get_worker()
    attempt = Attempt(w.address, os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES"))

    def log(kind: str, **kw) -> None:
        w.log_event(TOPIC, {"run": run_id, "key": unit.key, "kind": kind, **kw})

    log("started", worker=attempt.worker, pid=attempt.pid, gpu=attempt.gpu)

    def forward(ev: "TuneEvent") -> None:
        if ev.kind != "evaluation":  # one message per evaluation would only load the scheduler
            log("event", event=ev.kind, message=ev.message, done=ev.done, total=ev.total)

    cancel, stop = threading.Event(), threading.Event()
    remote_cancel = Event(cancel_name)

    def watch() -> None:  # the client's Ctrl-C: end the session between evaluations, as in process
        while not stop.is_set():
            try:
                if remote_cancel.wait(timeout=1.0):
                    cancel.set()
                    return
            except Exception:
                return

    threading.Thread(target=watch, name="kerntune-cancel-watch", daemon=True).start()
    rows: dict[str, list[dict]] = {}
    try:
        try:
            be = _worker_backend(backend)
        except NoGpuError as e:
            out = SessionOutcome(unit.key, unit.path, unit.kernel, error=str(e), error_kind="no_gpu")
        except KerntuneError as e:
            out = SessionOutcome(unit.key, unit.path, unit.kernel, error=str(e), error_kind="kerntune")
        else:
            with tempfile.TemporaryDirectory(prefix="kerntune-unit-", dir=w.local_directory) as tmp:
                store = Store.from_snapshot(zlib.decompress(snapshot), Path(tmp) / "results.sqlite")
                try:
                    for d in _DEVICES.values():  # the copy bandwidth measured for an earlier unit: once per device
                        if store.get_device(d.name) is None:
                            store.put_device(d)
                    marks = store.high_water()
                    out = run_session(unit, be, store, forward, cancel)
                    rows = store.rows_since(marks)
                    _DEVICES.update((d.name, d) for d in store.devices() if d.copy_bandwidth_gbps)
                finally:
                    store.close()
    finally:
        stop.set()
    out.attempts = [attempt]
    return out, rows


# --------------------------------------------------------------------------------------------- client side
class DaskRunner:
    """Units on a Dask cluster; each outcome's rows merged into ``store`` (the one writer) as it arrives."""

    name = "dask"

    def __init__(self, store: "Store", backend: str | None = None, gpus: str | int | None = None,
                 scheduler: str | None = None, timeout_s: float = 120.0):
        _require_dask()
        import dask
        from distributed import Client

        if (gpus is None) == (scheduler is None):
            raise KerntuneError("the Dask runner takes either --gpus (a local cluster) or --scheduler (an existing "
                                "one)")
        self.store = store
        self.backend = resolve_backend(backend)
        self.cluster = None
        self.scheduler_address = scheduler
        # workers must be able to start child processes (the GPU backend's), also after a nanny restarts one
        self._config = dask.config.set({"distributed.worker.daemon": False})
        try:
            if scheduler is None:
                self.devices = local_gpus(gpus, self.backend)
                self.cluster = local_cluster(self.devices)
                self.client = Client(self.cluster, timeout=timeout_s)
            else:
                self.devices = []
                try:
                    self.client = Client(scheduler, timeout=timeout_s)
                except (OSError, TimeoutError) as e:
                    raise KerntuneError(f"no Dask scheduler answers at {scheduler}: {e}") from None
            self.client.wait_for_workers(1, timeout=timeout_s)
            self.workers = self._gpu_workers()
        except BaseException:
            self.close()
            raise

    def _gpu_workers(self) -> list[str]:
        info = self.client.scheduler_info(n_workers=-1)
        out = [a for a, w in info.get("workers", {}).items() if (w.get("resources") or {}).get("GPU", 0) >= 1]
        if not out:
            raise KerntuneError(
                f"no worker of the Dask scheduler at {self.scheduler_address} offers a GPU: start one per GPU with "
                "`CUDA_VISIBLE_DEVICES=i DASK_DISTRIBUTED__WORKER__DAEMON=False dask worker ADDRESS --nthreads 1 "
                "--resources GPU=1`")
        return sorted(out)

    def describe(self) -> dict:
        return {"kind": self.name, "workers": len(self.workers),
                "scheduler": self.scheduler_address or "local", "gpus": self.devices or None}

    def worker_pids(self) -> dict[str, int]:
        """The process id of each worker, by address."""
        return self.client.run(os.getpid)

    def run(self, units: list[SessionUnit], on_event: Callable[[SessionUnit, "TuneEvent"], None] | None = None,
            cancel: threading.Event | None = None) -> Iterator[SessionOutcome]:
        """Each unit's outcome as it finishes (any order), its rows already in the store. After ``cancel``: the
        units running end as cancelled (between evaluations), those not started are not run."""
        from distributed import Event
        from distributed.scheduler import KilledWorker

        from agent_core.search.tuner import TuneEvent

        cancel = cancel or threading.Event()
        run_id = uuid.uuid4().hex[:12]
        by_key = {u.key: u for u in units}
        if len(by_key) != len(units):
            raise KerntuneError("two units of one run have the same key")
        attempts: dict[str, list[Attempt]] = {u.key: [] for u in units}
        emit = on_event or (lambda u, ev: None)

        def handler(event) -> None:
            _, msg = event
            if not isinstance(msg, dict) or msg.get("run") != run_id or msg.get("key") not in by_key:
                return
            u = by_key[msg["key"]]
            if msg["kind"] == "started":
                a = Attempt(msg["worker"], msg["pid"], msg.get("gpu"))
                attempts[u.key].append(a)
                n = len(attempts[u.key])
                where = f"{a.worker} (pid {a.pid}, CUDA_VISIBLE_DEVICES={a.gpu})"
                emit(u, TuneEvent("status", f"started on worker {where}" if n == 1 else
                                  f"redone on worker {where}: attempt {n}, the worker running it was lost"))
            elif msg["kind"] == "event":
                emit(u, TuneEvent(msg["event"], msg["message"], msg.get("done", 0), msg.get("total", 0)))

        self.client.subscribe_topic(TOPIC, handler)
        remote_cancel = Event(f"kerntune-cancel-{run_id}", client=self.client)
        # in every task's arguments, not scattered: the scheduler keeps a task's arguments, so a unit is redone
        # even when every worker that held scattered data died (one GPU: one worker)
        snapshot = zlib.compress(self.store.snapshot(), 6)
        futures = {self.client.submit(remote_session, u, self.backend, snapshot, remote_cancel.name, run_id,
                                      key=f"kerntune-{run_id}-{i}", resources={"GPU": 1}, pure=False): u
                   for i, u in enumerate(units)}
        pending = list(futures)
        cancelled = False
        try:
            while pending:
                if cancel.is_set() and not cancelled:
                    cancelled = True
                    remote_cancel.set()
                    for f in pending:
                        if not attempts[futures[f].key]:
                            f.cancel()
                done = [f for f in pending if f.done()]
                if not done:
                    time.sleep(0.05)
                    continue
                for f in done:
                    pending.remove(f)
                    u = futures.pop(f)
                    if f.status == "finished":
                        out, rows = f.result()
                        renumber_sessions(out, self.store.merge_rows(rows))
                        # the scheduler forgets a result once no client holds it: else a worker that dies later
                        # with the result still in its memory makes the scheduler run the whole unit again
                        f.release()
                    elif f.status == "cancelled":
                        out = SessionOutcome(u.key, u.path, u.kernel, error="not run: the run was interrupted",
                                             error_kind="not_run", cancelled=True)
                    else:
                        exc = f.exception()
                        if isinstance(exc, KilledWorker):
                            out = SessionOutcome(u.key, u.path, u.kernel, error_kind="lost", error=(
                                f"lost: every worker that ran it died ({len(attempts[u.key])} attempts; "
                                "distributed.scheduler.allowed-failures)"))
                        else:
                            out = SessionOutcome(u.key, u.path, u.kernel, error_kind="exception",
                                                 error=f"{type(exc).__name__}: {exc}")
                    if attempts[u.key]:
                        out.attempts = list(attempts[u.key])
                    yield out
        finally:
            for f in pending:
                f.cancel()
            try:
                self.client.unsubscribe_topic(TOPIC)
            except Exception:
                pass

    def close(self) -> None:
        for what in ("client", "cluster"):
            obj = getattr(self, what, None)
            if obj is not None:
                try:
                    obj.close()
                except Exception as e:  # closing must not hide the run's own outcome
                    _log.debug("closing the Dask %s: %s", what, e)
                setattr(self, what, None)
        cfg = getattr(self, "_config", None)
        if cfg is not None:
            cfg.__exit__(None, None, None)
            self._config = None

    def __enter__(self) -> "DaskRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
