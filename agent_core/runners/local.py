"""The in-process runner: the units one after the other, through one backend, into the store (as before
runners existed; the default of `kerntune bench` and `kerntune optimize --all`)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Iterator

from agent_core.runners.units import SessionOutcome, SessionUnit, run_session

if TYPE_CHECKING:
    from agent_core.measure.backend import Backend
    from agent_core.search.tuner import TuneEvent
    from agent_core.store import Store


class LocalRunner:
    name = "local"

    def __init__(self, backend: "Backend", store: "Store", close_backend: bool = False):
        self.backend, self.store, self._close_backend = backend, store, close_backend

    def describe(self) -> dict:
        return {"kind": self.name, "workers": 1}

    def run(self, units: list[SessionUnit], on_event: Callable[[SessionUnit, "TuneEvent"], None] | None = None,
            cancel: threading.Event | None = None) -> Iterator[SessionOutcome]:
        """Each unit's outcome as it finishes. After ``cancel``: the unit running ends as cancelled, the rest are
        not run."""
        cancel = cancel or threading.Event()
        for u in units:
            if cancel.is_set():
                yield SessionOutcome(u.key, u.path, u.kernel, error="not run: the run was interrupted",
                                     error_kind="not_run", cancelled=True)
                continue
            yield run_session(u, self.backend, self.store,
                              (lambda ev, _u=u: on_event(_u, ev)) if on_event else None, cancel)

    def close(self) -> None:
        """Closes the backend when it was made for the runner (``close_backend``); the store is the caller's."""
        if self._close_backend:
            self.backend.close()
