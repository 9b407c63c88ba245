"""A backend that answers from measurements recorded on a real GPU (the store); it never runs code.

Used in CI and for search experiments: the tuner drives it exactly like the GPU backend. A configuration
that was never recorded raises ``ReplayMiss``; the caller counts it as "not recorded".
"""

from __future__ import annotations

import copy

from agent_core.measure.backend import Problem, Variant
from agent_core.model import DeviceInfo, Evaluation, KerntuneError, Status, Timing, params_key
from agent_core.store import Store


class ReplayMiss(KerntuneError):
    """The recording has no measurement for what was asked."""


class ReplayBackend:
    """Replays ``store``'s recordings for ``device`` (None: the most recently recorded device).
    ``close()`` closes the store."""

    name = "replay"

    def __init__(self, store: Store, device: str | None = None):
        self.store = store
        self._device_name = device
        self._problem: Problem | None = None
        self._original: list[Timing] | None = None

    def _where(self) -> str:
        return str(self.store.path)

    def device(self) -> DeviceInfo:
        info = self.store.get_device(self._device_name)
        if info is None:
            if self._device_name is None:
                raise KerntuneError("the recording has no device: record one with a GPU "
                                    "(kerntune tune with the gpu backend)", self._where())
            have = ", ".join(d.name for d in self.store.devices()) or "none"
            raise KerntuneError(f"the recording has no device named '{self._device_name}' "
                                f"(recorded devices: {have})", self._where())
        return info

    def measure_copy_bandwidth(self) -> float:
        info = self.device()
        if info.copy_bandwidth_gbps is None:
            raise KerntuneError(f"the recording has no copy bandwidth for {info.name}; record one with a GPU",
                                self._where())
        return info.copy_bandwidth_gbps

    def start(self, problem: Problem, original: list[Timing] | None = None) -> list[Timing]:
        """The recorded original timings; with ``original`` (timings from earlier in the run), those."""
        dev = self.device().name
        timings = copy.deepcopy(original) if original is not None else \
            self.store.get_original(problem.original_hash, problem.spec_hash, dev)
        if timings is None:
            raise KerntuneError(f"no recorded measurement of the original kernel for this spec on {dev}; "
                                "record one with a GPU", self._where())
        self._problem = problem
        self._original = timings
        return copy.deepcopy(timings)

    def has_template(self) -> bool:
        """Whether the recording has any measurement of the started problem's template (on its spec and device):
        a template it never measured (one proposed after the recording) has nothing to replay."""
        if self._problem is None:
            raise RuntimeError("ReplayBackend.start(problem) must be called first")
        p = self._problem
        return bool(self.store.evaluations(template_hash=p.template_hash, spec_hash=p.spec_hash,
                                           device=self.device().name))

    def recorded_configs(self) -> list[dict]:
        """The configurations the recording measured for the started problem's template, in recorded order."""
        p = self._started()
        seen, out = set(), []
        for ev in self.store.evaluations(template_hash=p.template_hash, spec_hash=p.spec_hash,
                                         device=self.device().name):
            key = params_key(ev.params)
            if key not in seen:
                seen.add(key)
                out.append(dict(ev.params))
        return out

    def recorded_ask_batch(self) -> int | None:
        """How many configurations the recorded search of the started problem's template asked its strategy for at a
        time (an adaptive strategy's order depends on it); None where the recording does not say."""
        p = self._started()
        for s in reversed(self.store.template_sessions(p.template_hash, p.spec_hash, self.device().name)):
            batch = (s.get("summary") or {}).get("ask_batch")
            if isinstance(batch, int) and not isinstance(batch, bool) and batch >= 1:
                return batch
        return None

    def _started(self) -> Problem:
        if self._problem is None:
            raise RuntimeError("ReplayBackend.start(problem) must be called first")
        return self._problem

    def _recorded(self, variant: Variant) -> Evaluation:
        if self._problem is None:
            raise RuntimeError("ReplayBackend.start(problem) must be called before evaluating variants")
        p, dev = self._problem, self.device().name
        ev = self.store.get_evaluation(p.template_hash, p.spec_hash, dev, variant.params)
        if ev is None:
            raise ReplayMiss(f"not recorded: no measurement of {variant.params} for this template and spec "
                             f"on {dev}", self._where())
        return ev

    def evaluate(self, variant: Variant) -> Evaluation:
        ev = copy.deepcopy(self._recorded(variant))
        ev.from_store = True
        return ev

    def evaluate_many(self, variants: list[Variant], deadline: float | None = None) -> list[Evaluation]:
        """``evaluate`` for each variant; a configuration not recorded raises ``ReplayMiss`` (``deadline``: a
        recording answers at once)."""
        return [self.evaluate(v) for v in variants]

    def check(self, variant: Variant, size_sets: list[int], scale: float = 1.0) -> Evaluation:
        """The recorded verdict of the configuration (recorded on every size set: a failure recorded on a size set
        not asked for still counts, the conservative answer), without timings. A recording holds checks at the
        usual input magnitudes only: a scaled check is not recorded."""
        if scale != 1.0:
            raise ReplayMiss(f"not recorded: a check with inputs scaled by {scale:g}", self._where())
        ev = copy.deepcopy(self._recorded(variant))
        ev.from_store = True
        ev.timings, ev.gbps, ev.objective = [], [], None
        return ev

    def confirm(self, variant: Variant, rounds: int = 5) -> tuple[list[Timing], list[Timing]]:
        """The recorded original timings and the variant's recorded timings (``rounds`` is ignored)."""
        ev = self._recorded(variant)
        if ev.status != Status.OK or any(t is None for t in ev.timings):
            raise ReplayMiss(f"the recording of {variant.params} has no timings (status {ev.status.value})",
                             self._where())
        return copy.deepcopy(self._original), copy.deepcopy(ev.timings)

    def close(self) -> None:
        self.store.close()
