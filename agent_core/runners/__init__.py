"""Runners: units of work (whole tuning sessions: the optimize loop on one kernel of one file) run in process
or spread over GPUs, their results written to the workspace's store by one writer as they arrive.

- ``units``: the unit (``SessionUnit``), running one (``run_session``) and its outcome (``SessionOutcome``);
- ``local``: ``LocalRunner``, the units one after the other in this process (the default);
- ``dask_runner``: ``DaskRunner``, one Dask worker per GPU, a local cluster made on demand or an existing
  scheduler; a lost worker's unit is redone elsewhere.

A runner's ``run(units, on_event, cancel)`` yields each unit's outcome as it finishes; ``make_runner`` picks one
from the command line's ``--gpus`` / ``--scheduler``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.runners.local import LocalRunner
from agent_core.runners.units import Attempt, SessionOutcome, SessionUnit, run_session

if TYPE_CHECKING:
    from agent_core.store import Store

__all__ = ["Attempt", "LocalRunner", "SessionOutcome", "SessionUnit", "make_runner", "run_session"]


def make_runner(store: "Store", backend: str | None, gpus: str | None = None, scheduler: str | None = None):
    """``DaskRunner`` when ``gpus`` or ``scheduler`` is given, else ``LocalRunner`` over ``open_backend(backend)``
    (NoGpuError without a GPU, unless replay). The caller closes it; the store stays the caller's."""
    if gpus is not None or scheduler is not None:
        from agent_core.runners.dask_runner import DaskRunner
        return DaskRunner(store, backend, gpus=gpus, scheduler=scheduler)
    from agent_core.search.tuner import open_backend
    return LocalRunner(open_backend(backend), store, close_backend=True)
