"""The interface the tuner measures through.

A backend is given one ``Problem`` (the user's original kernel, compiled, with its spec) and then asked to
evaluate ``Variant``s of it. ``gpu_backend.GpuBackend`` measures on a real GPU; ``replay.ReplayBackend``
answers from measurements recorded in the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agent_core.model import Compiled, DeviceInfo, Evaluation, Launch, Timing, TuningSpec  # noqa: F401 (Launch: re-exported)


@dataclass
class Problem:
    spec: TuningSpec
    reference: Compiled  # the user's original kernel, as written
    reference_launches: list[Launch]  # its original launch configuration, one per size set
    original_hash: str  # hash of the user's file text when the session started
    template_hash: str
    spec_hash: str
    seed: int = 0

    def original_key(self, device: str) -> tuple[str, str, str]:
        """What the original's timings are known by on ``device``: the run's record (``TuneOptions.originals``)
        and the store's originals table (original_hash, spec_hash, device)."""
        return self.original_hash, self.spec_hash, device


@dataclass
class Variant:
    params: dict[str, int]
    compiled: Compiled | None  # None for backends that do not run code (replay)
    launches: list[Launch]  # one per size set
    meta: dict = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def device(self) -> DeviceInfo:
        """The device measured on (its copy bandwidth filled in)."""

    # optional: ``arch_hint() -> str | None``, the device's architecture known before ``device()`` (which may
    # start a worker): the tuner compiles the original meanwhile (GpuBackend; replay compiles nothing)

    def measure_copy_bandwidth(self) -> float:
        """Device-to-device copy bandwidth in GB/s (bytes read + written), measured once per device."""

    def start(self, problem: Problem, original: list[Timing] | None = None) -> list[Timing]:
        """Prepare the problem (inputs, reference outputs) and time the original kernel per size set. With
        ``original`` (the original's timings taken earlier in the same run, on this device, for this spec and
        original text), the original is not timed again: inputs and reference outputs are made, objectives are
        taken against ``original``, which is returned."""

    def evaluate(self, variant: Variant) -> Evaluation:
        """Verify the variant against the original on fresh inputs for every size set, then time it.
        Never raises for a bad variant: the status says what happened."""

    def evaluate_many(self, variants: list[Variant], deadline: float | None = None) -> list[Evaluation]:
        """``evaluate`` for each variant, in order, with as few round trips as the backend can manage. ``deadline``
        (``time.monotonic()``): no new round trip starts after it (a hang or crash mid-batch restarts the worker
        for the rest: those left are not measured, and not returned)."""

    def check(self, variant: Variant, size_sets: list[int], scale: float = 1.0) -> Evaluation:
        """Verify the variant against the original on fresh inputs for the given size sets (indices into the
        spec's sizes) and time nothing: the cheap test that decides whether a candidate is worth timing.
        Status OK (no timings) or what failed; never raises for a bad variant. ``scale`` != 1 multiplies every
        random floating-point input by it and the absolute tolerance with it (the small-magnitude probe that
        tells apart bindings differing only in a constant such as eps)."""

    def confirm(self, variant: Variant, rounds: int = 5) -> tuple[list[Timing], list[Timing]]:
        """Time the original and the variant interleaved, ``rounds`` times each, per size set:
        the figures a final report quotes."""

    def close(self) -> None:
        ...
