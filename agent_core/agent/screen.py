"""Screening expert bindings before round 1: decide by running which bindings compute what the kernel computes.

Every plausible binding of every family the kernel fits (``templating.experts.candidates``) is bound, one cheap
configuration of each (the expert's default where the constraints allow it) is compiled, all in parallel, and
checked against the original on the smallest size set (``Backend.check``: verify only, no timing). A binding
that fails costs one check, not a round. Per expert the best supported binding that verified is kept; the row
families' cluster twins follow the binding their family verified with. A binding whose expert has no configuration
for the spec's sizes (a row longer than its registers hold) is checked as the same binding of the expert's
long-row twin (``<name>_long``) instead.

Bindings that differ only in a constant added to a small quantity (eps in ``rsqrt(mean + eps)``) all verify on
inputs of the usual magnitude: at a mean square near 1 an eps of 1e-5 or 1e-6 moves no output beyond the
tolerances. So every binding that verified is checked once more on the smallest size set with its random
floating-point inputs scaled by 2^-10 (and the absolute tolerance with them): a binding of the wrong eps differs
from the original there. Where some binding of an expert holds at that magnitude, the ones that do not are
dropped; where none holds, nothing is decided by it (a kernel need not be scale-invariant) and the verdicts say so.

On a replay (CI) a binding the recording does not hold is "not recorded", not a failure: an expert none of
whose bindings could be checked keeps its likeliest binding, in the old order. A replay has no small-magnitude
check (recordings hold checks at the usual magnitudes).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from agent_core.measure import hardware
from agent_core.measure.backend import Backend, Problem, Variant
from agent_core.measure.compiler import compile_many
from agent_core.model import KernelTemplate, KerntuneError, Status, macro_name, sha256_text
from agent_core.source import spec as spec_mod
from agent_core.templating import experts
from agent_core.workspace import cache_dir

VERIFIED, FAILED, NOT_RECORDED, UNCHECKED = "verified", "failed", "not recorded", "unchecked"
SMALL_SCALE = 2.0 ** -10  # the small-magnitude probe: random inputs times this (a mean square near 1e-6)


@dataclass
class Verdict:
    binding: experts.Binding
    template: KernelTemplate | None
    status: str  # verified | failed | not recorded | unchecked (could not be bound, or pruned before running)
    detail: str = ""  # why it failed or was not checked
    params: dict = field(default_factory=dict)  # the configuration checked
    small: str = ""  # the small-magnitude probe of a verified binding: "" (not run), "holds", or how it differs

    def words(self, sizes: str) -> str:
        what = f"expert {self.binding.expert.name}, binding: {self.binding.describe()}"
        if self.status == VERIFIED:
            note = "" if self.small in ("", "holds") else (
                f" (with inputs scaled by 2^-10 it differs from the original, as every binding of its expert "
                f"does: {self.small})")
            return f"{what} … verified on {sizes}{note}"
        return f"{what} … {self.status}" + (f" ({self.detail})" if self.detail else "")

    def to_dict(self, size_set: int) -> dict:
        return {"expert": self.binding.expert.name, "binding": self.binding.describe(), "status": self.status,
                "detail": self.detail[:500], "params": self.params, "size_set": size_set,
                "small_inputs": self.small[:500],
                "template_hash": self.template.template_hash if self.template else None}


@dataclass
class Screening:
    verdicts: list[Verdict]
    size_set: int  # the index of the size set checked on
    templates: list[KernelTemplate]  # what the loop may search, in order: per expert the binding to tune
    sizes_text: str = ""  # the size set checked on, in words (333x4099)
    recorded: bool = False  # its verdicts are in the store

    def chosen(self) -> list[Verdict]:
        keep = {t.template_hash for t in self.templates}
        return [v for v in self.verdicts if v.template is not None and v.template.template_hash in keep]


def smallest_size_set(spec) -> int:
    """The size set that moves the fewest bytes: the cheapest to check on."""
    sizes = [spec_mod.bytes_moved(spec, s) for s in spec.sizes]
    return min(range(len(sizes)), key=lambda i: sizes[i])


def size_words(spec, i: int) -> str:
    return "x".join(str(v) for v in spec.sizes[i].values())


def screen(prep, backend: Backend, emit: Callable[[str], None] = lambda s: None,
           cancel: threading.Event | None = None, bindings: list[experts.Binding] | None = None,
           seed: int = 0, originals: dict | None = None) -> Screening:
    """Check one cheap configuration of every candidate binding of the prepared kernel (``tuner.Prepared``);
    the screening says which template of each expert the loop should tune. ``originals`` is the run's record of
    the original's timings (``TuneOptions.originals``): the screening reuses them, or adds the ones it took, so
    the original is timed once per run."""
    cancel = cancel or threading.Event()
    lib = {e.name: e for e in experts.load_library()}
    if bindings is None:
        bindings = experts.candidates(prep.cf, prep.kernel.name, prep.spec, list(lib.values()))
    idx = smallest_size_set(prep.spec)
    verdicts: list[Verdict] = []
    todo: list[tuple[Verdict, dict]] = []
    for b in bindings:
        try:
            t = experts.bind(b, prep.cf, prep.spec)
        except experts.NoConfiguration as e:  # rows longer than the expert holds: its long-row twin, if any
            long = experts.long_twin(b, lib)
            if long is None:
                verdicts.append(Verdict(b, None, UNCHECKED, e.message))
                continue
            try:
                b, t = long, experts.bind(long, prep.cf, prep.spec)
            except KerntuneError as e2:
                verdicts.append(Verdict(long, None, UNCHECKED, f"{e.message}; {e2.message}"))
                continue
        except KerntuneError as e:
            verdicts.append(Verdict(b, None, UNCHECKED, e.message))
            continue
        v = Verdict(b, t, UNCHECKED, params=t.space.original_config())
        verdicts.append(v)
        todo.append((v, v.params))
    if todo:
        emit(f"screening {len(todo)} expert bindings ({', '.join(_counts(bindings))}): one configuration each, "
             f"checked against the original on size set {size_words(prep.spec, idx)}")
        _check_all(prep, backend, todo, idx, cancel, seed, originals)
    for v in verdicts:
        if v.status in (VERIFIED, FAILED):
            emit(v.words(size_words(prep.spec, idx)))
    rest = [v for v in verdicts if v.status not in (VERIFIED, FAILED)]
    if rest:
        emit(f"screening: {len(rest)} bindings not checked ("
             + ", ".join(f"{n} {s}" for s, n in _tally(rest)) + "); every verdict is in the store")
    return Screening(verdicts, idx, _choose(verdicts, lib, prep), size_words(prep.spec, idx))


def _tally(verdicts: list[Verdict]) -> list[tuple[str, int]]:
    out: dict[str, int] = {}
    for v in verdicts:
        out[v.status] = out.get(v.status, 0) + 1
    return list(out.items())


def _counts(bindings: list[experts.Binding]) -> list[str]:
    return [f"{name}: {len(g)}" for name, g in experts.family_groups(bindings).items()]


def _check_all(prep, backend: Backend, todo: list[tuple[Verdict, dict]], idx: int, cancel: threading.Event,
               seed: int, originals: dict | None = None) -> None:
    dev = backend.device()
    runs = backend.name != "replay"
    launches, runnable = {}, []
    for v, cfg in todo:
        try:
            launches[id(v)] = [spec_mod.launch(v.template.launch, s, cfg) for s in prep.spec.sizes]
            runnable.append((v, cfg))
        except KerntuneError as e:  # the expert's launch does not evaluate on these sizes: nothing to run
            v.detail = f"no launch: {e.message}"
    todo = runnable
    compiled: dict[int, object] = {}
    if runs:
        jobs = [dict(text=v.template.text, kernel=v.template.entry or v.template.kernel, arch=dev.arch,
                     defines={macro_name(n): x for n, x in cfg.items()}, source_path=prep.path,
                     include_dirs=[str(Path(prep.path).parent)], cache_dir=cache_dir()) for v, cfg in todo]
        for (v, _), c in zip(todo, compile_many(jobs, cancel=cancel)):
            compiled[id(v)] = c
    reference = None
    ref_launches = prep.original_launches()
    if runs:
        from agent_core.measure.compiler import compile_kernel
        reference = compile_kernel(prep.text, prep.kernel.name, arch=dev.arch, source_path=prep.path,
                                   include_dirs=[str(Path(prep.path).parent)], cache_dir=cache_dir(),
                                   template_args=spec_mod.instantiation(prep.spec, prep.kernel),
                                   exact=True)  # the original as the user builds it (shared with the search's)
    from agent_core.measure.replay import ReplayMiss
    started = None  # a backend that runs code is started once: the problem differs only in the template's hash,
    # a key for recorded answers; a replay is started per template (it looks the template up)
    for v, cfg in todo:
        if cancel.is_set():
            v.detail = "cancelled"
            continue
        c = compiled.get(id(v))
        if isinstance(c, BaseException):
            v.status, v.detail = FAILED, "compile error: " + (c.message if isinstance(c, KerntuneError) else str(c))
            continue
        res = c.resources if c is not None else None
        why = hardware.check_launch(dev, launches[id(v)][idx], res)
        if why:
            v.detail = f"pruned: {why}"
            continue
        try:
            if not runs or started is None:
                problem = Problem(spec=prep.spec, reference=reference, reference_launches=ref_launches,
                                  original_hash=sha256_text(prep.text), template_hash=v.template.template_hash,
                                  spec_hash=prep.spec.spec_hash, seed=seed)
                key = problem.original_key(dev.name)
                known = originals.get(key) if originals is not None else None
                if known is not None:
                    backend.start(problem, original=known)
                else:
                    timings = backend.start(problem)
                    if originals is not None:
                        originals[key] = timings
                started = v.template.template_hash
            ev = backend.check(Variant(params=cfg, compiled=c, launches=launches[id(v)]), [idx])
        except ReplayMiss:
            v.status = NOT_RECORDED
            continue
        except KerntuneError as e:
            if not runs:  # a replay without the original recorded: nothing could be checked
                v.status, v.detail = NOT_RECORDED, e.message
                continue
            raise
        if ev.status == Status.OK:
            v.status = VERIFIED
        elif ev.status == Status.PRUNED:
            v.detail = f"pruned: {ev.error}"
        else:
            v.status, v.detail = FAILED, f"{ev.status.value}: {ev.error}"
    # The smallest size set may not tell bindings apart: a size equal to another there (rot_dim = head_size), or
    # a degenerate one (a channel stride of 1 makes a channel softmax a row softmax; one head, one split). Every
    # binding that verified there is checked on every other size set too (verification only: milliseconds), so
    # that the loop tunes one that holds on all of them rather than spending a round on one that fails everywhere
    # else. (A replay's verdict covers every size set already.)
    others = [i for i in range(len(prep.spec.sizes)) if i != idx]
    for v, cfg in todo:
        if not runs or not others or v.status != VERIFIED:
            continue
        if cancel.is_set():
            break
        ev = backend.check(Variant(params=cfg, compiled=compiled.get(id(v)), launches=launches[id(v)]), others)
        if ev.status != Status.OK:
            v.status, v.detail = FAILED, (f"verified on the smallest size set, then {ev.status.value} on the "
                                          f"others (that set could not tell it from the kernel): {ev.error}")
    if runs:
        _probe_small(backend, [(v, cfg) for v, cfg in todo if v.status == VERIFIED], compiled, launches, idx, cancel)


def _probe_small(backend: Backend, verified: list[tuple[Verdict, dict]], compiled: dict, launches: dict, idx: int,
                 cancel: threading.Event) -> None:
    """The small-magnitude probe (module docstring) of every verified binding; per expert, where some hold, the
    others fail."""
    groups: dict[str, list[Verdict]] = {}
    for v, cfg in verified:
        if cancel.is_set():
            return
        ev = backend.check(Variant(params=cfg, compiled=compiled.get(id(v)), launches=launches[id(v)]), [idx],
                           scale=SMALL_SCALE)
        v.small = "holds" if ev.status == Status.OK else f"{ev.status.value}: {ev.error}"
        groups.setdefault(v.binding.expert.name, []).append(v)
    for group in groups.values():
        if not any(v.small == "holds" for v in group):
            continue
        for v in group:
            if v.small != "holds":
                v.status, v.detail = FAILED, (
                    f"verified at the usual input magnitudes, but with inputs scaled by 2^-10 it differs from the "
                    f"original where another binding of its expert agrees (a constant such as eps bound wrongly): "
                    f"{v.small}")


def _choose(verdicts: list[Verdict], lib: dict, prep) -> list[KernelTemplate]:
    """Per expert (surer families first): its best supported binding that verified; where none verified, the
    likeliest one that could not be checked (not recorded, pruned); nothing where every binding failed. The
    row families' cluster twins follow, bound as their family's kept binding."""
    order: list[str] = []
    by_expert: dict[str, list[Verdict]] = {}
    for v in verdicts:
        if v.binding.expert.name not in by_expert:
            order.append(v.binding.expert.name)
        by_expert.setdefault(v.binding.expert.name, []).append(v)
    kept: list[Verdict] = []
    for name in order:
        vs = [v for v in by_expert[name] if v.template is not None]
        ok = [v for v in vs if v.status == VERIFIED] or [v for v in vs if v.status in (NOT_RECORDED, UNCHECKED)]
        if ok:
            kept.append(ok[0])
    kept.sort(key=lambda v: -v.binding.score)
    out = [v.template for v in kept]
    for v in kept:
        twin = experts.cluster_twin(v.binding, lib)
        if twin is None:
            continue
        try:
            out.append(experts.bind(twin, prep.cf, prep.spec))
        except KerntuneError:
            continue
    return out
