"""Tuning results for the editor: the engine's stored summaries, and the live state of running sessions.

Stored results come from ``tuner.result_summary`` over the store beside the file (read-only here; the
tuning thread writes through its own connection). A running session's best-so-far is kept in ``Live``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field

from agent_core.model import Evaluation, KerntuneError
from agent_core.store import Store
from agent_core.search.tuner import result_summary
from agent_core.workspace import store_path_for

from .documents import Doc

log = logging.getLogger(__name__)


@dataclass
class Live:
    """A tuning session in progress (updated on the event loop from the tuner's events)."""
    uri: str
    path: str
    kernel: str
    token: str
    cancel: threading.Event = field(default_factory=threading.Event)
    done: int = 0
    total: int = 0
    best: Evaluation | None = None
    ok: int = 0
    failed: int = 0
    pruned: int = 0
    message: str = "starting"
    finished: bool = False
    # the optimize loop's rounds: done = base (earlier rounds) + round_done
    round: int = 1
    round_done: int = 0
    round_total: int = 0
    round_started: bool = False  # an evaluation or the original's timing was seen in this round
    base: int = 0
    budget: int = 0  # evaluations per round
    estimate: int = 0  # evaluations of the whole loop, for the percentage
    percentage: int = 0  # last reported (never goes back)
    last_update: float = 0.0

    @property
    def speedup(self) -> float | None:
        if self.best is None or not self.best.objective:
            return None
        return 1.0 / self.best.objective


STAT_EVERY_S = 0.5  # how often the store file is looked at for changes by others (the CLI tuning)


class Results:
    """Stored summaries by (path, kernel), re-read when the store file changes; live sessions by (path, kernel)."""

    def __init__(self):
        self.live: dict[tuple[str, str], Live] = {}
        self._stores: dict[str, tuple[tuple, Store]] = {}
        self._cache: dict[tuple[str, str], tuple[tuple, dict | None]] = {}
        self._paths: dict[str, object] = {}  # source path -> store path
        self._looked: dict[str, tuple[float, tuple | None]] = {}  # store path -> (when, what _stat found)

    def _store(self, path: str) -> tuple[tuple, Store] | None:
        """The store beside ``path`` and its stamp; the file is looked at at most every STAT_EVERY_S (the
        editor asks for every kernel's result on every keystroke), or after ``forget``."""
        sp = self._paths.get(path)
        if sp is None:
            sp = self._paths[path] = store_path_for(path)
        now = time.monotonic()
        seen = self._looked.get(str(sp))
        if seen is not None and now - seen[0] < STAT_EVERY_S:
            return seen[1]
        got = self._stat(sp)
        self._looked[str(sp)] = (now, got)
        return got

    def _stat(self, sp) -> tuple[tuple, Store] | None:
        try:
            st = os.stat(sp)
        except OSError:
            return None
        wal = sp.with_name(sp.name + "-wal")
        try:
            wst = os.stat(wal)
            wstamp = (wst.st_mtime_ns, wst.st_size)
        except OSError:
            wstamp = None
        stamp = (str(sp), st.st_mtime_ns, st.st_size, wstamp)
        have = self._stores.get(str(sp))
        if have is None:
            have = (stamp, Store(sp, readonly=True))  # the editor only reads; tuning writes through its own
            self._stores[str(sp)] = have
        elif have[0] != stamp:
            have = (stamp, have[1])
            self._stores[str(sp)] = have
        return have

    def summary(self, doc: Doc, kernel: str) -> dict | None:
        """The latest stored summary for ``kernel`` with "stale" and "applied" for the document's current text."""
        got = self._store(doc.path)
        if got is None:
            return None
        stamp, store = got
        key = (doc.path, kernel)
        hit = self._cache.get(key)
        if hit is None or hit[0] != stamp:
            try:
                s = result_summary(store, doc.path, kernel, None)
            except KerntuneError as e:  # a damaged store or a malformed row: said plainly, nothing shown
                log.warning("the results of %s cannot be used: %s", kernel, e)
                s = None
            except Exception:
                log.exception("reading the store for %s failed", kernel)
                s = None
            hit = (stamp, s)
            self._cache[key] = hit
        s = hit[1]
        if s is None:
            return None
        text_hash = doc.memo("sha256", lambda: hashlib.sha256(doc.index.data).hexdigest())  # = sha256_text
        # a file whose text is what Apply best wrote is the result's tuned state: applied, not stale
        applied = text_hash in (s.get("applied_hashes") or ())
        return {**s, "applied": applied, "stale": text_hash != s.get("original_hash") and not applied}

    def forget(self, path: str) -> None:
        """Drop cached summaries for ``path`` (after a session wrote to its store)."""
        for key in [k for k in self._cache if k[0] == path]:
            del self._cache[key]
        self._looked.clear()

    def close(self) -> None:
        for _, store in self._stores.values():
            try:
                store.close()
            except Exception:
                pass
        self._stores.clear()
