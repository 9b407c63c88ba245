"""A GPU backend kept warm between Optimize runs: its worker process and CUDA context (1-4 s to start, most of a
small kernel's tuning run) outlive one run for ``$KERNTUNE_WARM_S`` seconds (default 120; 0: never kept), with
the run's buffers freed. One is kept at most; a second run while one is busy opens its own, as before."""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable

log = logging.getLogger(__name__)
DEFAULT_WARM_S = 120.0


def warm_seconds() -> float:
    raw = os.environ.get("KERNTUNE_WARM_S")
    if raw is None or raw == "":
        return DEFAULT_WARM_S
    try:
        return max(0.0, float(raw))
    except ValueError:
        log.warning("ignoring KERNTUNE_WARM_S=%r (not a number of seconds)", raw)
        return DEFAULT_WARM_S


class WarmBackends:
    """``acquire(open_backend)`` gives the idle warm backend when there is one, else a new one; ``release(b)``
    keeps ``b`` warm (where it can be: it has ``release`` and a running worker, and none is kept already) or closes
    it; the kept one is closed after ``idle_s`` without use, and by ``close()``."""

    def __init__(self, idle_s: float | None = None, timer: Callable[..., threading.Timer] = threading.Timer):
        self.idle_s = warm_seconds() if idle_s is None else idle_s
        self._timer_factory = timer
        self._lock = threading.Lock()
        self._idle = None
        self._timer: threading.Timer | None = None
        self.reused = 0  # runs that found a warm backend (for the log and the tests)
        self._closed = False  # after close() (the server shutting down) nothing is kept

    def acquire(self, open_backend: Callable[[], object]):
        with self._lock:
            b, self._idle = self._idle, None
            self._cancel_timer()
        if b is not None:
            if getattr(b, "warm", False):
                self.reused += 1
                log.info("reusing the warm GPU worker")
                return b
            _close(b)  # its worker died while idle: a fresh backend
        return open_backend()

    def release(self, backend) -> None:
        keep = not self._closed and self.idle_s > 0 and callable(getattr(backend, "release", None)) and getattr(backend, "warm", False)
        if keep:
            try:
                backend.release()
            except Exception:  # noqa: BLE001 - a backend that cannot be reset is closed, not kept
                log.exception("releasing the GPU backend failed; closing it")
                keep = False
        if keep:
            with self._lock:
                if self._idle is None and not self._closed:
                    self._idle = backend
                    self._timer = self._timer_factory(self.idle_s, self._expire, args=(backend,))
                    self._timer.daemon = True
                    self._timer.start()
                    return
        _close(backend)

    def _expire(self, backend) -> None:
        with self._lock:
            if self._idle is not backend:
                return
            self._idle, self._timer = None, None
        log.info("the warm GPU worker was idle for %.0f s: stopped", self.idle_s)
        _close(backend)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            b, self._idle = self._idle, None
            self._cancel_timer()
        if b is not None:
            _close(b)


def _close(backend) -> None:
    try:
        backend.close()
    except Exception:  # noqa: BLE001
        log.exception("closing a backend failed")
