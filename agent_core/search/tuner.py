"""One tuning session: template -> spec -> compile -> prune -> measure -> store.

The session is driven by a search strategy (agent_core.search.strategies) and measures through a Backend (a real GPU,
or the replay of recorded measurements). Every evaluation is written to the store as it arrives; one that
is already in the store for the same template, spec, device and parameters is reused, not re-measured.
Progress goes to ``on_event``; ``cancel`` (a threading.Event) stops the session between evaluations.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from agent_core.measure import hardware
from agent_core.source import spec as spec_mod
from agent_core.measure.backend import Backend, Launch, Problem, Variant
from agent_core.measure import timeline as tl
from agent_core.measure.compiler import CompileError, compile_kernel, compile_many
from agent_core.source.cuda_parse import kernel_has_errors, parse_cuda
from agent_core.model import (CudaFile, DeviceInfo, Evaluation, Kernel, KernelTemplate, KerntuneError, NoGpuError, Status,
                    Timing, TuningSpec, macro_name, params_key, params_words, sha256_text, to_plain)
from agent_core.search.strategies import make_strategy
from agent_core.templating.workfiles import read_template_files
from agent_core.store import Store
from agent_core.templating.templatize import templatize
from agent_core.workspace import cache_dir, workdir_for

# Objectives within this fraction of the best are a tie (the geometric mean moves by about this much between
# repeated timings); among tied configurations the one with the least total time over the size sets wins.
TIE_FRACTION = 0.01
# Early stop: a session ends when its best objective has not improved by more than EARLY_STOP_GAIN (the
# measurement noise of the objective, as TIE_FRACTION) over the last EARLY_STOP_AFTER evaluations measured.
EARLY_STOP_AFTER = 25
EARLY_STOP_GAIN = 0.01
REPLAY_MISS_LIMIT = 10  # x budget: a replay asked this many unrecorded configurations has left the recorded order
FAILED = {Status.COMPILE_ERROR, Status.VERIFY_FAILED, Status.CRASHED, Status.TIMEOUT, Status.LAUNCH_ERROR}


@dataclass
class TuneOptions:
    budget: int = 60  # evaluations measured (pruned configurations do not count)
    time_budget_s: float | None = None
    strategy: str = "auto"
    seed: int = 0
    confirm_rounds: int = 5
    arch: str | None = None  # default: the device's
    compile_workers: int | None = None
    # stop when the best has not improved by > EARLY_STOP_GAIN for this many evaluations (None or 0: never; an
    # exhaustive search asked for by name measures every configuration; "auto" may stop early)
    early_stop_after: int | None = EARLY_STOP_AFTER
    # the original's timings taken earlier in this run, by (original hash, spec hash, device): a session whose
    # original is there sets the backend up without timing the original again, and adds it there when not
    originals: dict | None = None


@dataclass
class TuneEvent:
    kind: str  # "status" | "original" | "evaluation" | "best" | "done"
    message: str
    done: int = 0
    total: int = 0
    evaluation: Evaluation | None = None
    best: Evaluation | None = None


@dataclass
class Prepared:
    cf: CudaFile
    kernel: Kernel
    structural: KernelTemplate | None  # the user's own kernel, parameterized (None: nothing tunable)
    template: KernelTemplate | None  # what `tune` runs: the user's edited files, or the structural template
    spec: TuningSpec  # (None: nothing structurally tunable; `optimize` searches the other templates)
    text: str
    path: str
    structural_why: KerntuneError | None = None  # why there is no structural template

    def original_launches(self, spec: TuningSpec | None = None) -> list[Launch]:
        """The original kernel's launch on every size set of ``spec`` (default: its own): the spec's grid and block
        at the structural template's original parameter values."""
        spec = spec or self.spec
        cfg = self.structural.space.original_config() if self.structural else {}
        return [spec_mod.launch(spec, sizes, cfg) for sizes in spec.sizes]


def structural_reason(prep: Prepared) -> str:
    """Why the kernel has no structural template, in one line (without the "nothing to tune in kernel" head)."""
    e = prep.structural_why
    if e is None:
        return "no tunable site"
    return re.sub(r"^nothing to tune in kernel '[^']*': ", "", e.message).split(". kerntune lifts")[0]


def require_template(prep: Prepared) -> KernelTemplate:
    """The template `tune` searches; a KerntuneError naming why when the kernel has none."""
    if prep.template is not None:
        return prep.template
    k = prep.kernel
    raise KerntuneError(f"nothing structurally tunable in kernel '{k.name}' ({structural_reason(prep)}); try "
                        f"`kerntune optimize {prep.path} -k {k.name}`, which also searches the expert templates",
                        prep.path, k.name_span.line, k.name_span.col)


@dataclass
class TuneResult:
    session_id: int
    status: str  # "finished" | "cancelled" | "failed"
    summary: dict
    best: Evaluation | None = None
    template: KernelTemplate | None = None
    evaluations: list[Evaluation] = field(default_factory=list)
    best_variant: Variant | None = None  # compiled, for profiling (None on replay)
    original: list[Timing] = field(default_factory=list)  # the original as timed before the search
    timeline: dict | None = None  # where the session's time went (agent_core.measure.timeline), when it owned the run


def read_source(path: str | Path) -> str:
    p = Path(path)
    if not p.is_file():
        raise KerntuneError(f"no such file: {path}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise KerntuneError(f"{path} is not UTF-8 text ({e})") from None


def parse_checked(path: str, kernel: str, text: str | None = None) -> tuple[CudaFile, Kernel]:
    """Parse the file and find the kernel; refuse a kernel with syntax errors in it."""
    text = read_source(path) if text is None else text
    cf = parse_cuda(text, str(path))
    k = cf.kernel(kernel)
    errors = kernel_has_errors(cf, kernel)
    if errors:
        e = errors[0]
        raise KerntuneError(f"kernel '{kernel}' has a syntax error here ({e.message}); fix it before tuning",
                            str(path), e.span.line, e.span.col)
    return cf, k


def prepare(path: str, kernel: str, text: str | None = None, use_workspace_files: bool = True,
            tuning: bool = True) -> Prepared:
    """Everything a session needs before it measures: parse, template, spec. Raises KerntuneError. A kernel
    without a structurally tunable site is prepared all the same (``structural`` and ``template`` None, the
    reason in ``structural_why``): the optimize loop searches its other templates. ``tuning``: the kernel is
    about to be tuned (a kernel template whose tuned instantiation is explicitly specialized is refused)."""
    path = str(Path(path).resolve())
    text = read_source(path) if text is None else text
    cf, k = parse_checked(path, kernel, text)
    why_not = None
    try:
        structural = templatize(cf, kernel)
    except KerntuneError as e:
        structural, why_not = None, e
    template = None
    if use_workspace_files:
        template = read_template_files(workdir_for(path), path, kernel, text)
    if template is None:
        template = structural
    spec = spec_mod.find_spec(cf, kernel)
    if spec is None:
        raise KerntuneError(f"kernel '{kernel}' has no tuning spec: draft one with "
                            f"`kerntune spec {path} -k {kernel} --write` and fill in the sizes",
                            path, k.span.line, k.span.col, field_name="spec")
    names = set(structural.space.params) if structural else set()
    spec_mod.validate_spec(spec, k, names | (set(template.space.params) if template else set()),
                           structural.space.original_config() if structural else None)
    if tuning and k.template_params:
        _refuse_specialized(cf, k, spec, path)
        if spec.template_args is None:  # the instantiation the file shows, for a compile that finds several
            from agent_core.source import instantiation as inst
            try:
                spec.inferred_template_args = inst.spec_instantiation(cf, k, spec)
            except KerntuneError:
                pass  # the compile chooses, or says which template_args the spec needs
    return Prepared(cf, k, structural, template, spec, text, path, why_not)


def _refuse_specialized(cf, k, spec, path: str) -> None:
    """KerntuneError when the instantiation the spec tunes is an explicit specialization in the file (one
    kerntune's apply wrote, or the user's): that code runs, not the template's, so tuning the template would
    measure the same kernel under every configuration."""
    from agent_core.source import instantiation as inst
    try:
        args = inst.spec_instantiation(cf, k, spec)
    except KerntuneError:
        return  # the compile chooses the instantiation, or says why it cannot
    line = inst.specialized_at(cf, k, args)
    if line is not None:
        raise KerntuneError(f"{inst.specialization_name(k, args)}, the instantiation the spec tunes, is an explicit "
                            f"specialization (line {line + 1}): its own code runs, not the template's. Tune it "
                            "by undoing the apply that wrote it, or give the spec other template_args",
                            path, line)



def open_backend(kind: str | None, store: Store | None = None, replay_store_path: str | None = None) -> Backend:
    """"auto" | "gpu" | "replay" (or "replay:/path"); $KERNTUNE_BACKEND when kind is None."""
    kind = kind or os.environ.get("KERNTUNE_BACKEND") or "auto"
    if kind.startswith("replay"):
        from agent_core.measure.replay import ReplayBackend
        path = replay_store_path or (kind.split(":", 1)[1] if ":" in kind else None)
        if not path:
            raise KerntuneError("the replay backend needs a recorded store: replay:/path/to/results.sqlite")
        if not Path(path).is_file():
            raise KerntuneError(f"no recorded store at {path}")
        return ReplayBackend(Store(path))
    if kind not in ("auto", "gpu"):
        raise KerntuneError(f"unknown backend '{kind}' (use auto, gpu or replay:PATH)")
    from agent_core.measure.gpu_backend import GpuBackend, gpu_available
    ok, why = gpu_available()
    if not ok:
        raise NoGpuError(f"no CUDA device available: {why}. Tuning measures on a GPU; "
                         "without one, kerntune can still show, templatize, draft specs and show stored results.")
    return GpuBackend()


class _Either:
    """Set when either event is."""

    def __init__(self, a: threading.Event, b: threading.Event):
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _launches(template: KernelTemplate, spec: TuningSpec, cfg: dict) -> list[Launch]:
    src = template.launch if template.launch else spec
    return [spec_mod.launch(src, sizes, cfg) for sizes in spec.sizes]


class Session:
    """The state of one tuning run (kept small; `tune` is the entry point)."""

    def __init__(self, prep: Prepared, backend: Backend, store: Store, options: TuneOptions,
                 on_event: Callable[[TuneEvent], None] | None, cancel: threading.Event | None):
        self.prep, self.backend, self.store, self.opt = prep, backend, store, options
        self.on_event = on_event or (lambda e: None)
        self.cancel = cancel or threading.Event()
        self.template = require_template(prep)
        self.spec = prep.spec
        self.evaluations: list[Evaluation] = []
        self.best: Evaluation | None = None
        self.measured = 0  # evaluations that count toward the budget
        self.pruned = 0
        self.failed = 0
        self.original: list[Timing] = []
        self.device: DeviceInfo | None = None
        self.session_id: int | None = None
        self.best_variant: Variant | None = None
        self.not_recorded: list[dict] = []  # replay: configurations the recording does not have
        self.ask_batch = 1  # configurations asked of the strategy at a time (recorded: a replay asks alike)
        self.stop_reason: str | None = None  # why the search ended before its budget (early stop, time)
        self.original_reused = False
        self._strategy = None  # made by setup() where the first batch compiles while the GPU worker starts
        self._first: tuple[list[dict], ThreadPoolExecutor, Future, threading.Event] | None = None
        self._gain_at = 0  # self.measured when the best last improved by more than EARLY_STOP_GAIN
        self.started = time.monotonic()
        # a template made for a regime of sizes (serves: few rows) is ranked on those size sets only (it is
        # still verified on all of them): the per-shape dispatch uses it there
        from agent_core.templating.space import served_size_sets
        self.served = served_size_sets(self.template, self.spec.sizes) if self.template.serves else None

    # ------------------------------------------------------------------ helpers
    def emit(self, kind: str, message: str, ev: Evaluation | None = None) -> None:
        self.on_event(TuneEvent(kind, message, self.measured, self.opt.budget, ev, self.best))

    def score(self, ev: Evaluation) -> float | None:
        """What the search minimizes: the evaluation's objective (geometric mean over the size sets of variant
        time / original time), over the size sets a regime template serves where it has ``serves``."""
        if not ev.ok or ev.objective is None:
            return None
        if not self.served:
            return ev.objective
        try:
            return math.exp(sum(math.log(ev.timings[i].median_us / self.original[i].median_us)
                                for i in self.served) / len(self.served))
        except (IndexError, AttributeError, ValueError, ZeroDivisionError):
            return ev.objective

    def out_of_budget(self) -> bool:
        if self.measured >= self.opt.budget:
            return True
        # the time budget counts once a batch is measured: a round started with little of the run's time left still
        # measures the batch it compiled (else a verified expert binding, screened and compiled, ends with nothing)
        if (self.opt.time_budget_s is not None and self.measured > 0
                and time.monotonic() - self.started > self.opt.time_budget_s):
            self.stop_reason = self.stop_reason or (f"time budget of {self.opt.time_budget_s:.0f} s spent after "
                                                    f"{self.measured} evaluations")
            return True
        n = self.opt.early_stop_after if self.opt.strategy != "exhaustive" else None  # asked for every one
        if n and self.best is not None and self.measured - self._gain_at >= n and self.measured < self.opt.budget:
            self.stop_reason = self.stop_reason or (
                f"early stop: the best has not improved by more than {EARLY_STOP_GAIN:.0%} in the last "
                f"{self.measured - self._gain_at} evaluations ({self.measured} of a budget of {self.opt.budget})")
            return True
        return self.cancel.is_set()

    @property
    def runs_code(self) -> bool:
        return self.backend.name != "replay"

    def _compile_job(self, text: str, kernel: str, defines: dict | None, template_args: list[str] | None = None,
                     arch: str | None = None) -> dict:
        return dict(text=text, kernel=kernel, arch=arch or self.arch, defines=defines, source_path=self.prep.path,
                    include_dirs=[str(Path(self.prep.path).parent)], cache_dir=cache_dir(),
                    template_args=template_args)

    def _compile_original_early(self):
        """(arch, pool, future) of the original compiling on another thread for the architecture the backend
        knows before its device is up (GpuBackend.arch_hint: nvidia-smi, while the worker process starts and
        makes its CUDA context), or None (replay; no hint). setup() uses it where the device's architecture is
        the hint's, else compiles again; a compile error surfaces there, as it would have."""
        hint = getattr(self.backend, "arch_hint", None)
        if not self.runs_code or hint is None:
            return None
        arch = self.opt.arch or hint()
        if not arch:
            return None
        job = self._compile_job(self.prep.text, self.prep.kernel.name, None,
                                spec_mod.instantiation(self.spec, self.prep.kernel), arch=arch)
        job["exact"] = True  # the original, as the user builds it: the reference and every speedup's base
        timeline = tl.current()

        def run():
            token = tl.bind(timeline if isinstance(timeline, tl.Timeline) else None)
            try:
                return compile_kernel(**job)
            finally:
                tl.unbind(token)
        self.emit("status", f"compiling the original {self.prep.kernel.name} (for {arch}, while the GPU worker "
                            "starts)")
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kerntune-original")
        return arch, pool, pool.submit(run)

    # ------------------------------------------------------------------ phases
    def _batch_size(self) -> int:
        """Configurations asked of the strategy at a time: one nvcc per CPU core (a replay asks as recorded)."""
        if self.runs_code:
            return max(1, self.opt.compile_workers or os.cpu_count() or 1)
        recorded_batch = getattr(self.backend, "recorded_ask_batch", None)
        return max(1, (recorded_batch() if recorded_batch else None) or 1)

    def _make_strategy(self):
        with tl.phase("strategy"):
            return make_strategy(self.opt.strategy, self.template.space, self.spec.sizes, seed=self.opt.seed,
                                 budget=self.opt.budget)

    def _compile_first_batch_early(self, arch: str) -> None:
        """Ask the strategy for its first batch now and compile it on other threads for ``arch`` (the hint) while
        the GPU worker starts and the original is timed: the cubins land in the compile cache, where the search's
        first batch finds them. The strategy is the search's own (asked once: the order is as without this)."""
        if self.opt.budget <= 0 or self.cancel.is_set():
            return
        self._strategy = self._make_strategy()
        with tl.phase("strategy"):
            cfgs = self._strategy.ask(min(self._batch_size(), self.opt.budget))
        if not cfgs:
            self._first = ([], None, None, threading.Event())  # type: ignore[assignment]
            return
        t = self.template
        jobs = [self._compile_job(t.text, t.entry or t.kernel, {macro_name(n): v for n, v in cfg.items()},
                                  spec_mod.instantiation(self.spec, self.prep.kernel, t, cfg), arch=arch)
                for cfg in cfgs]
        stop = threading.Event()
        cancel = _Either(self.cancel, stop)
        timeline = tl.current()

        def run():
            token = tl.bind(timeline if isinstance(timeline, tl.Timeline) else None)
            try:
                return compile_many(jobs, workers=self.opt.compile_workers, cancel=cancel)
            finally:
                tl.unbind(token)
        self.emit("status", f"compiling the first {len(cfgs)} configurations (for {arch}, while the GPU worker "
                            "starts)")
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kerntune-first-batch")
        self._first = (cfgs, pool, pool.submit(run), stop)

    def _end_first_batch(self, wait: bool) -> list[dict] | None:
        """The early first batch's configurations (None: there was none), after its compilation ended
        (``wait``, timed as the compile wait) or was told to stop."""
        if self._first is None:
            return None
        cfgs, pool, fut, stop = self._first
        self._first = None
        if pool is None:
            return cfgs
        if not wait:
            stop.set()
        with tl.phase("compile"):  # waiting for what is left of the first batch's compilation
            pool.shutdown(wait=True, cancel_futures=not wait)
        return cfgs

    def setup(self) -> None:
        """The device, the original (compiled, verified as the reference, timed) and the session's record; where
        the backend runs code, the original and the search's first batch compile while the GPU worker starts."""
        try:
            self._setup()
        except BaseException:
            self._end_first_batch(wait=False)  # no nvcc left running for a search that will not come
            raise

    def _setup(self) -> None:
        early = self._compile_original_early()
        try:
            if early is not None:
                self._compile_first_batch_early(early[0])
            dev = self.backend.device()  # may start the GPU worker: the original compiles meanwhile
        except BaseException:
            if early is not None:
                early[1].shutdown(wait=True)
            raise
        stored = self.store.get_device(dev.name)
        bw = stored.copy_bandwidth_gbps if stored and stored.copy_bandwidth_gbps else None
        if bw is None:
            self.emit("status", f"measuring the copy bandwidth of {dev.name}")
            bw = self.backend.measure_copy_bandwidth()
        self.device = replace(dev, copy_bandwidth_gbps=bw)
        self.store.put_device(self.device)
        self.arch = self.opt.arch or self.device.arch

        t = self.template
        prep = self.prep
        ref_launches = prep.original_launches(self.spec)
        reference = None
        if early is not None:
            (arch, pool, fut) = early
            pool.shutdown(wait=False)
            if arch == self.arch:
                with tl.phase("compile"):  # waiting for what is left of the original's compilation
                    reference = fut.result()
            else:
                fut.cancel()
        if self.runs_code and reference is None:
            self.emit("status", f"compiling the original {prep.kernel.name}")
            reference = compile_kernel(**self._compile_job(prep.text, prep.kernel.name, None,
                                                           spec_mod.instantiation(self.spec, prep.kernel)), exact=True)
        self.problem = Problem(spec=self.spec, reference=reference, reference_launches=ref_launches,
                               original_hash=sha256_text(prep.text), template_hash=t.template_hash,
                               spec_hash=self.spec.spec_hash, seed=self.opt.seed)
        self.session_id = self.store.start_session(
            prep.path, prep.kernel.name, self.problem.original_hash, t.template_hash, self.problem.spec_hash,
            self.device.name, self.opt.strategy, self.opt.budget, self.opt.seed, t.origin)
        from agent_core.templating.space import space_to_toml
        self.store.put_template(t.template_hash, t.kernel, t.origin, t.text, space_to_toml(t))
        key = self.problem.original_key(self.device.name)
        known = self.opt.originals.get(key) if self.opt.originals is not None else None
        if known is not None:
            self.emit("status", f"setting up the original {prep.kernel.name} on {self.device.name} (timed earlier "
                                "in this run: not timed again)")
            self.original = self.backend.start(self.problem, original=known)
            self.original_reused = True
            if self.store.get_original(*key) is None:  # timed by the screening, before any session
                with tl.phase("store"):
                    self.store.put_original(*key, self.original)
        else:
            self.emit("status", f"timing the original {prep.kernel.name} on {self.device.name}")
            self.original = self.backend.start(self.problem)
            with tl.phase("store"):
                self.store.put_original(*key, self.original)
            if self.opt.originals is not None:
                self.opt.originals[key] = self.original
        self.emit("original", "original: " + ", ".join(f"{x.median_us:.1f} us" for x in self.original)
                  + (" (from earlier in this run)" if known is not None else ""))

    def record(self, ev: Evaluation) -> None:
        if not ev.reused and (not ev.from_store or not self.runs_code):  # replayed answers: this session's too
            with tl.phase("store"):
                self.store.put_evaluation(self.session_id, self.template.template_hash, self.problem.spec_hash,
                                          self.device.name, ev)
        self.evaluations.append(ev)
        if ev.status == Status.PRUNED:
            self.pruned += 1
        else:
            self.measured += 1
            if ev.status in FAILED:
                self.failed += 1
        sc = self.score(ev)
        if sc is not None and (self.best is None or sc < self.score(self.best)):
            if self.best is None or sc < self.score(self.best) * (1 - EARLY_STOP_GAIN):
                self._gain_at = self.measured
            self.best = ev
            where = f" on the {len(self.served)} size sets it serves" if self.served else ""
            self.emit("best", f"best so far {1 / sc:.2f}x{where} with {ev.params}", ev)
        self.emit("evaluation", f"{ev.status.value} {ev.params}", ev)

    def prepare_batch(self, cfgs: list[dict], cancel=None) -> list[Evaluation | Variant | None]:
        """Per configuration, in order: an Evaluation already decided (found in the store, pruned by the launch
        or the compiled resources, a compile error), the compiled Variant to measure, or None when ``cancel``
        (default: the session's) stopped its compilation. Safe to run on another thread than the measuring
        one (the next batch compiles while this one is measured)."""
        cancel = cancel or self.cancel
        items: list[Evaluation | Variant | None] = [None] * len(cfgs)
        todo: list[tuple[int, dict, list[Launch]]] = []
        for i, cfg in enumerate(cfgs):
            with tl.phase("store"):
                stored = self.store.get_evaluation(self.template.template_hash, self.problem.spec_hash,
                                                   self.device.name, cfg)
            if stored is not None:
                stored.reused = True
                items[i] = stored
                continue
            launches = _launches(self.template, self.spec, cfg)
            reason = next((r for r in (hardware.check_launch(self.device, ln, None) for ln in launches) if r), None)
            if reason:
                items[i] = Evaluation(params=cfg, status=Status.PRUNED, error=reason)
                continue
            todo.append((i, cfg, launches))
        if not self.runs_code:
            for i, cfg, launches in todo:
                items[i] = Variant(params=cfg, compiled=None, launches=launches)
            return items  # type: ignore[return-value]
        t = self.template
        jobs = [self._compile_job(t.text, t.entry or t.kernel, {macro_name(n): v for n, v in cfg.items()},
                                  spec_mod.instantiation(self.spec, self.prep.kernel, t, cfg))
                for _, cfg, _ in todo]
        compiled = compile_many(jobs, workers=self.opt.compile_workers, cancel=cancel) if jobs else []
        for (i, cfg, launches), comp in zip(todo, compiled):
            if cancel.is_set() and isinstance(comp, BaseException):
                continue  # not compiled because the session stopped: nothing to record
            if isinstance(comp, BaseException):
                msg = comp.message if isinstance(comp, KerntuneError) else str(comp)
                items[i] = Evaluation(params=cfg, status=Status.COMPILE_ERROR, error=msg)
                continue
            res = comp.resources
            reason = next((r for r in (hardware.check_launch(self.device, ln, res) for ln in launches) if r), None)
            if reason:
                items[i] = Evaluation(params=cfg, status=Status.PRUNED, error=reason, resources=res)
                continue
            blocks, occ, _ = hardware.occupancy(self.device, launches[0].threads, res.registers,
                                                res.static_smem + launches[0].smem)
            res = replace(res, occupancy=occ, blocks_per_sm=blocks)
            items[i] = Variant(params=cfg, compiled=replace(comp, resources=res), launches=launches)
        return items  # type: ignore[return-value]

    def measure_batch(self, items: list[Evaluation | Variant | None]) -> list[Evaluation]:
        """The prepared batch's evaluations: the variants measured (in one backend request where it can), the
        decided ones as they are. A replayed configuration the recording lacks goes to ``not_recorded``."""
        variants = [x for x in items if isinstance(x, Variant)]
        if self.cancel.is_set():
            variants = []
        measured: dict[int, Evaluation] = {}
        if variants and self.runs_code:
            deadline = self.started + self.opt.time_budget_s if self.opt.time_budget_s is not None else None
            for v, ev in zip(variants, self.backend.evaluate_many(variants, deadline=deadline)):
                if ev.resources is None:
                    ev.resources = v.compiled.resources
                measured[id(v)] = ev
        elif variants:
            from agent_core.measure.replay import ReplayMiss
            for v in variants:
                try:
                    measured[id(v)] = self.backend.evaluate(v)
                except ReplayMiss:
                    self.not_recorded.append(v.params)  # not charged to the budget
        out = []
        for x in items:
            if x is None:
                continue
            if isinstance(x, Evaluation):
                out.append(x)
            elif id(x) in measured:
                out.append(measured[id(x)])
        return out

    def evaluate_batch(self, cfgs: list[dict]) -> list[Evaluation]:
        """Evaluate configurations: stored answers first, then compile in parallel, prune, measure."""
        return self.measure_batch(self.prepare_batch(cfgs))

    def _prepare_in_background(self, pool: ThreadPoolExecutor, cfgs: list[dict], stop: threading.Event) -> Future:
        timeline = tl.current()
        cancel = _Either(self.cancel, stop)

        def run() -> list:
            token = tl.bind(timeline if isinstance(timeline, tl.Timeline) else None)
            try:
                return self.prepare_batch(cfgs, cancel)
            finally:
                tl.unbind(token)
        return pool.submit(run)

    def search(self) -> None:
        """Ask the strategy for a batch, compile it, measure it, tell the results. Where the strategy's order does
        not depend on the results (exhaustive, random), the next batch compiles while the GPU measures this one;
        an adaptive strategy (TPE) is asked only after it has been told the batch before. Ends at the budget,
        the time budget, an early stop (``stop_reason``) or a cancel."""
        first = self._end_first_batch(wait=True)  # asked and compiled while the worker started (setup)
        strategy = self._strategy if first is not None else self._make_strategy()
        batch = self._batch_size()
        self.ask_batch = batch  # an adaptive strategy's order depends on it: a replay of this run asks alike

        def ask(n: int) -> list[dict]:
            if n <= 0:
                return []
            with tl.phase("strategy"):
                return strategy.ask(n)

        ahead_ok = self.runs_code and strategy.name in ("exhaustive", "random")
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kerntune-prepare") if ahead_ok else None
        stop = threading.Event()  # the search ended: no new nvcc for a batch compiled ahead
        has = getattr(self.backend, "has_template", None)
        # replay misses are not charged to the budget, except for a template the recording never measured: asking
        # for every configuration of its space would walk all of it for nothing
        unknown = not self.runs_code and has is not None and not has()

        def spent() -> bool:
            return self.out_of_budget() or (unknown and len(self.not_recorded) >= self.opt.budget)

        def diverged() -> list[dict] | None:
            """A replay whose search has asked for REPLAY_MISS_LIMIT x budget configurations the recording lacks
            (its order left the recorded run's: a recording made before the ask batch was stored, or a strategy
            that changed since) ends over the recorded configurations it has not reached, in recorded order."""
            recorded = getattr(self.backend, "recorded_configs", None)
            if self.runs_code or recorded is None or len(self.not_recorded) < REPLAY_MISS_LIMIT * self.opt.budget:
                return None
            seen = {params_key(e.params) for e in self.evaluations}
            return [c for c in recorded() if params_key(c) not in seen]
        try:
            if spent():
                cfgs = []
            else:
                cfgs = first if first is not None else ask(min(batch, self.opt.budget - self.measured))
            ahead = self._prepare_in_background(pool, cfgs, stop) if pool and cfgs else None
            while cfgs:
                if ahead is not None:
                    with tl.phase("compile"):  # waiting for the batch's compilation
                        items = ahead.result()
                else:
                    items = self.prepare_batch(cfgs)
                nxt: list[dict] = []
                if pool is not None and not self.cancel.is_set():
                    nxt = ask(min(batch, self.opt.budget - self.measured - len(cfgs)))
                ahead = self._prepare_in_background(pool, nxt, stop) if nxt else None
                missed = len(self.not_recorded)
                for ev in self.measure_batch(items):
                    self.record(ev)
                    with tl.phase("strategy"):
                        strategy.tell(ev.params, self.score(ev))
                with tl.phase("strategy"):
                    for cfg in self.not_recorded[missed:]:
                        strategy.tell(cfg, None)
                if spent():
                    break
                rest = diverged()
                if rest is not None:
                    self.emit("status", f"replay: the search asked for {len(self.not_recorded)} configurations the "
                                        "recording lacks (its order left the recorded run's); the round ends over the "
                                        f"{min(len(rest), self.opt.budget - self.measured)} recorded configurations "
                                        "it had not reached")
                    for cfg in rest[:max(0, self.opt.budget - self.measured)]:
                        for ev in self.measure_batch(self.prepare_batch([cfg])):
                            self.record(ev)
                            with tl.phase("strategy"):
                                strategy.tell(ev.params, self.score(ev))
                        if spent():
                            break
                    break
                cfgs = nxt if pool is not None else ask(min(batch, self.opt.budget - self.measured))
                if pool is not None and not cfgs:
                    cfgs = ask(min(batch, self.opt.budget - self.measured))
                    ahead = self._prepare_in_background(pool, cfgs, stop) if cfgs else None
        finally:
            if pool is not None:
                stop.set()
                with tl.phase("compile"):  # nvcc runs already started for a batch that is not measured
                    pool.shutdown(wait=True, cancel_futures=True)
        if self.stop_reason:
            self.emit("status", self.stop_reason)

    def break_tie(self) -> None:
        """Among the verified configurations whose objective is within TIE_FRACTION of the best (tied within
        measurement noise), keep the one with the least total time over the size sets: the one that saves the
        most time where the work is. Nothing to choose from when nothing verified or the session was cancelled."""
        if self.best is None or self.cancel.is_set():
            return

        def total(e: Evaluation) -> float:
            return sum(t.median_us for i, t in enumerate(e.timings)
                       if t is not None and (not self.served or i in self.served))
        best = self.score(self.best)
        tied = [e for e in self.evaluations if e.ok and e.objective is not None and len(e.timings) == len(
            self.best.timings) and all(t is not None for t in e.timings)
                and self.score(e) <= best * (1 + TIE_FRACTION)]
        pick = min(tied, key=lambda e: (total(e), self.score(e)), default=self.best)
        if pick is not self.best and total(pick) < total(self.best):
            self.emit("status", f"tie within {TIE_FRACTION:.0%} of the best objective: {pick.params} takes "
                                f"{total(pick):.1f} us over the size sets against {total(self.best):.1f} us for "
                                f"{self.best.params}; keeping {pick.params}", pick)
            self.best = pick

    def confirm(self) -> tuple[list[Timing], list[Timing]] | None:
        if self.best is None or self.cancel.is_set():
            return None
        self.emit("status", "confirming the best against the original, interleaved")
        compiled = None
        while self.runs_code:
            cfg, t = self.best.params, self.template
            try:
                compiled = compile_kernel(**self._compile_job(t.text, t.entry or t.kernel,
                                                              {macro_name(n): v for n, v in cfg.items()},
                                                              spec_mod.instantiation(self.spec, self.prep.kernel, t,
                                                                                     cfg)),
                                          exact=True)  # the figure reported: nvcc's binary, as the user builds it
                break
            except CompileError as e:  # verified alone, but the file does not build with it (another instantiation
                # of the kernel the file has breaks): never written back; the next best verified one is confirmed
                if not self._unbuildable(self.best, e):
                    return None
        cfg = self.best.params
        variant = Variant(params=cfg, compiled=compiled, launches=_launches(self.template, self.spec, cfg))
        self.best_variant = variant if compiled is not None else None
        return self.backend.confirm(variant, self.opt.confirm_rounds)

    def _unbuildable(self, ev: Evaluation, err: CompileError) -> bool:
        """``ev`` (verified by the search's compile of the kernel alone) fails nvcc's build of the whole file: it is
        recorded as a compile error (in the store too, so no later session takes it), and the next best verified
        configuration becomes the best. False when none is left."""
        lines = err.message.strip().splitlines()
        first = (lines[1:2] or lines[:1] or [""])[0].strip()  # nvcc's first error line, after our heading
        ev.status, ev.error = Status.COMPILE_ERROR, ("verified, but the file does not build with it (nvcc, every "
                                                    f"instantiation of the file): {first}")
        self.failed += 1
        with tl.phase("store"):
            self.store.put_evaluation(self.session_id, self.template.template_hash, self.problem.spec_hash,
                                      self.device.name, ev)
        ok = [e for e in self.evaluations if self.score(e) is not None]
        self.best = min(ok, key=self.score, default=None)
        self.emit("status", f"{params_words(ev.params)}: {ev.error}; "
                  + (f"confirming the next best, {params_words(self.best.params)}" if self.best else
                     "no other verified configuration"), ev)
        return self.best is not None

    def summary(self, status: str, confirmed) -> dict:
        spec, dev = self.spec, self.device
        bw = dev.copy_bandwidth_gbps if dev else None
        orig_us = [t.median_us for t in self.original]
        best_us = [t.median_us if t else None for t in self.best.timings] if self.best else None
        if confirmed:
            orig_us = [t.median_us for t in confirmed[0]]
            best_us = [t.median_us for t in confirmed[1]]
        speedup = _geomean([o / b for o, b in zip(orig_us, best_us)]) if best_us and orig_us else None
        nbytes = [spec_mod.bytes_moved(spec, s) for s in spec.sizes]
        gbps = [n / (u * 1e3) for n, u in zip(nbytes, best_us)] if best_us else None
        orig_gbps = [n / (u * 1e3) for n, u in zip(nbytes, orig_us)] if orig_us else []
        ok = sorted((e for e in self.evaluations if e.ok and e.objective is not None), key=lambda e: e.objective)
        per_param: dict[str, dict[str, float]] = {}
        for e in ok:
            for n, v in e.params.items():
                d = per_param.setdefault(n, {})
                d[str(v)] = min(d.get(str(v), math.inf), e.objective)
        failures = [{"params": e.params, "status": e.status.value, "error": e.error[:500]}
                    for e in self.evaluations if e.status in FAILED][:20]
        pruned = [{"params": e.params, "reason": e.error[:200]} for e in self.evaluations
                  if e.status == Status.PRUNED][:20]
        return {
            "session_id": self.session_id, "status": status, "kernel": self.prep.kernel.name,
            "path": self.prep.path, "device": dev.name if dev else None, "copy_bw_gbps": bw,
            "sizes": spec.sizes, "bytes": nbytes, "original_us": orig_us, "best_us": best_us,
            "speedup": speedup, "original_gbps": orig_gbps, "gbps": gbps,
            "pct_copy": [g / bw * 100 for g in gbps] if gbps and bw else None,
            "original_pct_copy": [g / bw * 100 for g in orig_gbps] if bw else None,
            "best_params": self.best.params if self.best else None,
            "original_params": self.prep.structural.space.original_config() if self.prep.structural else {},
            "best_resources": to_plain(self.best.resources) if self.best and self.best.resources else None,
            "counts": {"ok": len(ok), "failed": self.failed, "pruned": self.pruned,
                       "measured": self.measured, "reused": sum(e.reused for e in self.evaluations),
                       "not_recorded": len(self.not_recorded)},
            "top": [{"params": e.params, "objective": e.objective,
                     "us": [t.median_us if t else None for t in e.timings]} for e in ok[:10]],
            "failures": failures, "pruned": pruned, "per_param": per_param,
            "confirmed": confirmed is not None, "backend": getattr(self.backend, "name", "?"), "timing": to_plain(self.original[0]) if self.original else None,
            "served": self.served,
            "template_hash": self.template.template_hash, "original_hash": self.problem.original_hash,
            "origin": self.template.origin, "strategy": self.opt.strategy, "budget": self.opt.budget,
            "wall_s": time.monotonic() - self.started, "stop_reason": self.stop_reason,
            "original_reused": self.original_reused, "ask_batch": self.ask_batch,
        }


def tune(path: str, kernel: str, backend: Backend, store: Store, options: TuneOptions | None = None,
         on_event: Callable[[TuneEvent], None] | None = None, cancel: threading.Event | None = None,
         text: str | None = None, prepared: Prepared | None = None) -> TuneResult:
    """Run one tuning session. KerntuneError for bad input; a failure while measuring ends the session as
    "failed" with everything measured so far kept in the store."""
    options = options or TuneOptions()
    with tl.run_scope() as (timeline, own_run):
        with tl.phase("prepare"):
            prep = prepared or prepare(path, kernel, text)
        s = Session(prep, backend, store, options, on_event, cancel)
        s.setup()
        status, confirmed = "finished", None
        try:
            s.search()
            s.break_tie()
            confirmed = s.confirm()
            if s.cancel.is_set():
                status = "cancelled"
        except KerntuneError:
            status = "failed"
            raise
        except Exception:
            status = "failed"
            raise
        finally:
            summary = s.summary(status, confirmed)
            report = None
            if own_run:  # a session on its own (kerntune tune): the run's time is the session's
                timeline.finish()
                report = timeline.report()
                summary["timeline"] = report
            store.finish_session(s.session_id, status, summary)
            if report is not None:
                store.put_step(s.session_id, "timeline", tl.render(report), report)
            s.emit("done", f"{status}: " + (f"{summary['speedup']:.2f}x" if summary["speedup"] else "no speedup"))
    return TuneResult(s.session_id, status, summary, s.best, s.template, s.evaluations, s.best_variant, s.original,
                      report)


def confirm_configs(prep: Prepared, backend: Backend, configs: list[tuple[KernelTemplate, dict[str, int]]],
                    rounds: int = 5, seed: int = 0, cancel: threading.Event | None = None,
                    originals: dict | None = None) -> list[tuple[list[Timing], list[Timing]]]:
    """Time configurations (of any templates of the kernel, each verified on the spec's size sets by an earlier
    search) interleaved with the original, ``rounds`` times each per size set: (original, variant) timings per
    configuration, in order. The backend is set up once per template (a replay looks the template up), without
    timing the original again where ``originals`` (TuneOptions.originals) has its timings from earlier in the
    run (the confirmation times the original interleaved anyway)."""
    dev = backend.device()
    runs = backend.name != "replay"
    job = dict(arch=dev.arch, include_dirs=[str(Path(prep.path).parent)], cache_dir=cache_dir(),
               source_path=prep.path, exact=True)  # confirmed figures are of nvcc's binaries, as the user builds
    reference = compile_kernel(prep.text, prep.kernel.name, template_args=spec_mod.instantiation(prep.spec, prep.kernel),
                               **job) if runs else None
    ref_launches = prep.original_launches()
    out: list[tuple[list[Timing], list[Timing]] | None] = [None] * len(configs)
    order = sorted(range(len(configs)), key=lambda i: configs[i][0].template_hash)
    current = None
    for i in order:
        if cancel is not None and cancel.is_set():
            raise KerntuneError("cancelled")
        t, cfg = configs[i]
        if t.template_hash != current:
            problem = Problem(spec=prep.spec, reference=reference, reference_launches=ref_launches,
                              original_hash=sha256_text(prep.text), template_hash=t.template_hash,
                              spec_hash=prep.spec.spec_hash, seed=seed)
            known = (originals or {}).get(problem.original_key(dev.name))
            backend.start(problem, original=known) if known is not None else backend.start(problem)
            current = t.template_hash
        compiled = compile_kernel(t.text, t.entry or t.kernel, defines={macro_name(n): v for n, v in cfg.items()},
                                  template_args=spec_mod.instantiation(prep.spec, prep.kernel, t, cfg),
                                  **job) if runs else None
        out[i] = backend.confirm(Variant(params=cfg, compiled=compiled, launches=_launches(t, prep.spec, cfg)),
                                 rounds)
    return out  # type: ignore[return-value]


def result_summary(store: Store, path: str, kernel: str, current_text: str | None = None,
                   device: str | None = None) -> dict | None:
    """The best result for this kernel on one device model: among the finished (or cancelled) sessions of the file
    as it was at the latest one (the rounds of an optimize run, re-runs of tune) on ``device`` (default: the
    device of the latest session), the one with the highest speedup; "stale" is set when the file's text has
    changed since. ``sessions`` lists the ids considered; ``devices`` every device model with a result for that
    text of the file, newest first (a configuration is tuned for one device model: one per model)."""
    path = str(Path(path).resolve())
    finished = [r for r in store.sessions(path, kernel) if r.get("status") in ("finished", "cancelled")]
    mine = [r for r in finished if device is None or r.get("device") == device]
    if not mine:
        return None
    row = mine[0]  # newest first
    same_text = [r for r in finished if r.get("original_hash") == row.get("original_hash") and r.get("summary")]
    same = [r for r in same_text if r.get("device") == row.get("device")]
    with_speedup = [r for r in same if r["summary"].get("speedup")]
    best = max(with_speedup, key=lambda r: (r["summary"]["speedup"], r["id"])) if with_speedup else row
    summary = dict(best.get("summary") or {})
    if not summary:
        return None
    summary["session_id"] = best["id"]
    summary["sessions"] = [r["id"] for r in same]
    summary["devices"] = list(dict.fromkeys(r["device"] for r in same_text if r.get("device")))
    for r in same:  # newest first: the optimize run with an LLM that the best session belongs to
        st = next((x for x in store.steps(r["id"]) if x["kind"] == "llm_summary"
                   and best["id"] in ((x.get("data") or {}).get("sessions") or [])), None)
        if st is not None:
            summary["llm_run"] = {"session_id": r["id"], "text": st["text"]}
            break
    summary["dispatch"] = _recorded_dispatch(store, same, summary)
    summary["applied_hashes"] = sorted({(st.get("data") or {}).get("text_hash") for r in same
                                        for st in store.steps(r["id"]) if st["kind"] == "applied"} - {None})
    h = sha256_text(current_text) if current_text is not None else None
    summary["applied"] = h is not None and h in summary["applied_hashes"]
    summary["stale"] = h is not None and h != row.get("original_hash") and not summary["applied"]
    return summary


def record_applied(store: Store, summary: dict, path: str, kernel: str, new_text: str) -> None:
    """Record that the result ``summary`` was applied to ``path``, as the text the file has after the apply:
    ``result_summary`` then calls a file with that text "applied" (the tuned state of the file), not stale."""
    sid = summary.get("session_id")
    if sid is None:
        return
    d = summary.get("dispatch") or None
    store.put_step(sid, "applied", f"applied to {Path(path).name}: "
                   + (f"per-shape dispatch of {len(d.get('entries') or [])}" if d else
                      ", ".join(f"{k}={v}" for k, v in (summary.get("best_params") or {}).items())),
                   {"text_hash": sha256_text(new_text), "kernel": kernel, "path": str(Path(path).resolve()),
                    "params": summary.get("best_params"), "dispatch": bool(d),
                    "speedup": (d or {}).get("speedup") or summary.get("speedup")})


def _recorded_dispatch(store: Store, sessions: list[dict], summary: dict) -> dict | None:
    """The newest per-shape dispatch (agent_core.agent.dispatch, a ``dispatch`` step) recorded for these sessions whose
    winner is the summary's best configuration (an older one, chosen against another winner, no longer holds);
    None when a newer optimize run ended with one configuration for that winner (a ``single`` step: the
    dispatch turned off, or no longer gaining)."""
    want = (summary.get("template_hash"), params_key(summary.get("best_params") or {}))
    for r in sorted(sessions, key=lambda r: -r["id"]):
        for st in reversed(store.steps(r["id"])):
            if st["kind"] not in ("dispatch", "single") or not isinstance(st.get("data"), dict):
                continue
            # a dispatch chosen in place of a winner that cannot be written names that winner (loop._dispatch_instead)
            w = st["data"].get("in_place_of") or st["data"].get("winner") or {}
            if (w.get("template_hash"), params_key(w.get("params") or {})) == want:
                return st["data"] if st["kind"] == "dispatch" else None
    return None


def verify_rewrite(path: str, kernel: str, old_text: str, new_text: str, backend: Backend,
                   seed: int = 1, new_spec: TuningSpec | None = None
                   ) -> tuple[Evaluation, tuple[list[Timing], list[Timing]] | None]:
    """Check a rewritten file (what `apply` writes) against the original one on the backend's GPU: the old
    kernel at the old spec's launch is the reference; the new kernel runs at the launch the rewritten spec
    gives (``new_spec``, default: the spec in ``new_text``; an in-place rewrite changes grid and block), on the
    same sizes, verified on fresh inputs, then timed interleaved."""
    return verify_kernels(path, kernel, old_text, new_text, backend, [(kernel, new_spec)], seed)[0]


def verify_kernels(path: str, kernel: str, old_text: str, new_text: str, backend: Backend,
                   kernels: list[tuple[str, TuningSpec | None]], seed: int = 1
                   ) -> list[tuple[Evaluation, tuple[list[Timing], list[Timing]] | None]]:
    """``verify_rewrite`` for several kernels of the rewritten file (a per-shape dispatch writes one per
    configuration): each (name, its spec after the rewrite; None: the spec in ``new_text``) is verified against
    the original ``kernel`` on every size set of the original spec and, when it passes, timed interleaved with
    it. Returns (evaluation, confirmation or None) per kernel, in order."""
    old = prepare(path, kernel, old_text, use_workspace_files=False, tuning=False)
    spec = old.spec
    dev = backend.device()
    job = dict(arch=dev.arch, include_dirs=[str(Path(path).resolve().parent)], cache_dir=cache_dir())
    ref = compile_kernel(old_text, kernel, template_args=spec_mod.instantiation(spec, old.kernel), **job)
    problem = Problem(spec=spec, reference=ref, reference_launches=old.original_launches(),
                      original_hash=sha256_text(old_text), template_hash=sha256_text(new_text),
                      spec_hash=spec.spec_hash, seed=seed)
    checks = []
    for name, new_spec in kernels:
        cf_new, _ = parse_checked(path, name, new_text)
        try:
            new_cfg = templatize(cf_new, name).space.original_config()
        except KerntuneError:
            new_cfg = {}
        if new_spec is None:
            new_spec = spec_mod.find_spec(cf_new, name)
        if new_spec is None:
            raise KerntuneError(f"the rewritten file has no tuning spec for '{name}'", path)
        checks.append((name, new_spec, new_cfg, spec_mod.instantiation(new_spec, cf_new.kernel(name))))
    backend.start(problem)
    out = []
    for name, new_spec, new_cfg, targs in checks:
        new = compile_kernel(new_text, name, template_args=targs, exact=True, **job)
        variant = Variant(params=new_cfg, compiled=new,
                          launches=[spec_mod.launch(new_spec, s, new_cfg) for s in spec.sizes])
        ev = backend.evaluate(variant)
        out.append((ev, backend.confirm(variant, 5) if ev.ok else None))
    return out
