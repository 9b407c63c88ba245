"""The optimize loop: templating, testing, analysis, planning — round after round.

Each round is one tuning session (agent_core.search.tuner) over one template: the user's kernel parameterized
structurally, the user's kernel rewritten (agent_core.templating.rewrites: vectors, warp reductions, ...), an expert template bound to the user's signature (agent_core.templating.experts), or a template an LLM
proposed (agent_core.agent.llm). After each round the analysis says what limits the best variant and the planner
chooses the next step; both are written to the store as the session's steps, so the user can read how the
result was reached. After the last round, the per-shape dispatch (agent_core.agent.dispatch) gives each size set
that another verified configuration serves clearly faster than the winner that configuration.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from agent_core.measure.backend import Backend
from agent_core.model import KernelTemplate, KerntuneError, NoGpuError, TuningSpec
from agent_core.agent.planning import Planner, Round, RuleBasedPlanner, Step, analyze
from agent_core.store import Store
from agent_core.search.tuner import Prepared, TuneEvent, TuneOptions, TuneResult, confirm_configs, prepare, tune

if TYPE_CHECKING:
    from agent_core.agent.dispatch import Dispatch

# A test designer gives the spec to verify and time a template on (extra size sets, input distributions), or None.
TestDesigner = Callable[[Prepared, KernelTemplate], "TuningSpec | None"]
# A templater proposes extra templates for a kernel (expert bindings, LLM proposals) given the rounds so far.
Templater = Callable[[Prepared, list[Round]], list[KernelTemplate]]


@dataclass
class AgentOptions:
    budget_per_round: int = 40
    max_rounds: int = 4
    total_budget: int | None = None  # evaluations over all rounds
    time_budget_s: float | None = None
    strategy: str = "auto"
    seed: int = 0
    use_experts: bool = True
    dispatch: bool = True  # after the rounds: a configuration of its own for size sets the winner serves badly


@dataclass
class AgentResult:
    rounds: list[Round] = field(default_factory=list)
    final_step: Step | None = None
    dispatch: "Dispatch | None" = None  # per-shape dispatch over every round's verified configurations

    @property
    def best(self) -> Round | None:
        ok = [r for r in self.rounds if r.summary.get("speedup")]
        return max(ok, key=lambda r: r.summary["speedup"]) if ok else None


def expert_templater(prep: Prepared, rounds: list[Round]) -> list[KernelTemplate]:
    """Expert templates whose family the kernel's structure suggests, bound to its signature."""
    from agent_core.templating import experts
    out = []
    for m in experts.match(prep.cf, prep.kernel.name, prep.spec):
        try:
            out.append(experts.bind(m, prep.cf, prep.spec))
        except KerntuneError:
            continue
    return out


def rewrite_templater(prep: Prepared, rounds: list[Round]) -> list[KernelTemplate]:
    """The semantic rewrite template of the user's own kernel (agent_core.templating.rewrites), composed onto its
    structural template; none when no rewrite applies."""
    from agent_core.templating.rewrites import compose
    got = compose(prep.cf, prep.kernel.name, prep.spec, prep.structural)
    return [got.template] if got.template is not None else []


def _unsupported(t: KernelTemplate, backend: Backend) -> str | None:
    """Why the device cannot run template ``t`` (thread-block clusters need sm_90 or newer), or None."""
    if "__cluster_dims__" not in t.text:
        return None
    arch = backend.device().arch
    m = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
    if m and int(m.group(1)) >= 90:
        return None
    return f"it launches thread-block clusters (__cluster_dims__), which need sm_90 or newer; the device is {arch}"


def optimize(path: str, kernel: str, backend: Backend, store: Store, options: AgentOptions | None = None,
             planner: Planner | None = None, templaters: list[Templater] | None = None,
             on_event: Callable[[TuneEvent], None] | None = None, cancel: threading.Event | None = None,
             text: str | None = None, test_designer: TestDesigner | None = None) -> AgentResult:
    """``test_designer`` (e.g. the LLM's) is asked, before an LLM-proposed template is searched, for size sets
    and input distributions that stress it; the round then verifies and times it (and the original) on them
    too. When the backend cannot measure them (a replay recorded without them), the round uses the spec."""
    opt = options or AgentOptions()
    planner = planner or RuleBasedPlanner(opt.budget_per_round, dispatch=opt.dispatch)
    cancel = cancel or threading.Event()
    emit = on_event or (lambda e: None)
    prep = prepare(path, kernel, text)
    candidates: list[KernelTemplate] = [prep.template]
    if templaters is None:
        templaters = [rewrite_templater] + ([expert_templater] if opt.use_experts else [])
    result = AgentResult()
    spent = 0
    verified: list[tuple[KernelTemplate, TuneResult]] = []  # the rounds searched on the spec's own size sets
    skipped: list[KernelTemplate] = []  # templates the device cannot run
    for i in range(opt.max_rounds + 1):
        for t in templaters:
            try:
                for c in t(prep, result.rounds):
                    if all(c.template_hash != x.template_hash for x in candidates + skipped):
                        why = _unsupported(c, backend)
                        if why:
                            skipped.append(c)
                            emit(TuneEvent("status", f"the {c.origin} template is not searched: {why}"))
                        else:
                            candidates.append(c)
            except KerntuneError as e:
                emit(TuneEvent("status", f"templater skipped: {e}"))
        tried = {r.template.template_hash for r in result.rounds}
        step = planner.plan(result.rounds, [c for c in candidates if c.template_hash not in tried]
                            if result.rounds else candidates)
        emit(TuneEvent("status", f"plan: {step.action}: {step.reason}"))
        if step.action == "stop" or step.template is None or cancel.is_set() or i == opt.max_rounds:
            result.final_step = step
            if result.rounds:
                store.put_step(result.rounds[-1].summary["session_id"], "plan", step.reason,
                               {"action": step.action})
            break
        budget = step.budget or opt.budget_per_round
        if opt.total_budget is not None:
            budget = min(budget, opt.total_budget - spent)
            if budget <= 0:
                result.final_step = Step("stop", "total evaluation budget spent")
                break
        topt = TuneOptions(budget=budget, time_budget_s=opt.time_budget_s, strategy=opt.strategy, seed=opt.seed)
        prepared = replace(prep, template=step.template)
        if test_designer is not None and step.template.origin.startswith("llm"):
            designed = test_designer(prep, step.template)
            if designed is not None:
                extra = len(designed.sizes) - len(prep.spec.sizes)
                emit(TuneEvent("status", f"test designer: {extra} extra size sets for the {step.template.origin} "
                                         "template (verified and timed on them too)"))
                prepared = replace(prepared, spec=designed)
        try:
            r = tune(path, kernel, backend, store, topt, on_event=on_event, cancel=cancel, prepared=prepared)
        except KerntuneError as e:
            if prepared.spec is prep.spec or isinstance(e, NoGpuError):
                raise
            emit(TuneEvent("status", f"the designed size sets cannot be measured here ({e.message}); "
                                     "searching on the spec's"))
            r = tune(path, kernel, backend, store, topt, on_event=on_event, cancel=cancel,
                     prepared=replace(prep, template=step.template))
        spent += r.summary["counts"]["measured"]
        if prepared.spec is prep.spec:
            verified.append((step.template, r))
        profile = _profile(backend, r)
        analysis = analyze(r.summary, profile)
        sid = r.session_id
        store.put_step(sid, "plan", f"{step.action}: {step.reason}", {"action": step.action,
                                                                        "origin": step.template.origin})
        store.put_step(sid, "analysis", analysis.text, analysis.data)
        result.rounds.append(Round(i, step.template, r.summary, analysis, step))
        emit(TuneEvent("status", f"round {i + 1} ({step.template.origin}): " + analysis.text.splitlines()[0]))
        if r.status == "cancelled":
            result.final_step = Step("stop", "cancelled")
            break
    if opt.dispatch and result.best is not None and not cancel.is_set():
        result.dispatch = per_shape_dispatch(prep, result, verified, backend, store, emit, cancel)
    if result.best is not None and result.dispatch is None and not cancel.is_set():
        # this run's answer is one configuration: an older run's dispatch for the same winner no longer applies
        sid = result.rounds[-1].summary.get("session_id")
        if sid is not None:
            b = result.best.summary
            store.put_step(sid, "single", "one configuration for every size set" + (
                "" if opt.dispatch else " (per-shape dispatch turned off)"),
                {"winner": {"template_hash": b.get("template_hash"), "params": b.get("best_params")}})
    return result


def per_shape_dispatch(prep: Prepared, result: AgentResult, verified: list[tuple[KernelTemplate, TuneResult]],
                       backend: Backend, store: Store, emit: Callable[[TuneEvent], None],
                       cancel: threading.Event) -> "Dispatch | None":
    """The dispatch over the verified configurations of every round whose template the rewrite can hold several
    configurations of (an expert's or an LLM's partial template, not the user's whole file), against the best
    round's winner; confirmed interleaved with the original and recorded as a step of the last round's session.
    None when no size set gains enough, or the winner is the kernel's own structural template."""
    from agent_core.agent import dispatch as dsp
    from agent_core.apply import is_whole_file
    best = result.best
    wt = best.template
    if is_whole_file(wt, prep.cf):
        emit(TuneEvent("status", f"per-shape dispatch: not offered, the winner is the {wt.origin} template, which "
                                 "is written back whole (one configuration)"))
        return None
    templates = {wt.template_hash: wt}
    cands = []
    for t, r in verified:
        if is_whole_file(t, prep.cf) or not r.original:
            continue
        templates[t.template_hash] = t
        orig = [x.median_us for x in r.original]
        for ev in r.evaluations:
            if ev.ok and len(ev.timings) == len(orig) and all(x is not None for x in ev.timings):
                cands.append(dsp.Candidate(t.template_hash, t.origin, dict(ev.params),
                                           [x.median_us for x in ev.timings], orig))
    d = dsp.choose(cands, (wt.template_hash, best.summary["best_params"]), prep.spec.sizes)
    if d is None:
        emit(TuneEvent("status", "per-shape dispatch: no size set is served at least "
                                 f"{dsp.MIN_GAIN:.0%} faster by another verified configuration; one configuration"))
        return None
    emit(TuneEvent("status", f"per-shape dispatch: {len(d.entries)} configurations ({d.speedup:.2f}x against "
                             f"{d.single_speedup:.2f}x in the search); confirming them against the original"))
    todo = list({e.key: e for e in d.entries + [d.winner]}.values())  # the winner is often entry 0: time it once
    sid = result.rounds[-1].summary.get("session_id")
    try:
        figures = dict(zip([e.key for e in todo], confirm_configs(
            prep, backend, [(templates[e.template_hash], e.params) for e in todo], cancel=cancel)))
    except KerntuneError as e:  # the rounds stand; only the dispatch is not offered
        why = "cancelled" if cancel.is_set() else e.message
        emit(TuneEvent("status", f"per-shape dispatch: not confirmed ({why}); one configuration"))
        if sid is not None:
            store.put_step(sid, "plan", f"per-shape dispatch not kept: its confirmation failed ({why})",
                           {"action": "dispatch", "search": d.to_dict()})
        return None
    confirmed = dsp.confirm(d, lambda e: figures[e.key])
    if confirmed is not None:
        confirmed.backend = getattr(backend, "name", "")
    if confirmed is None:
        why = "; ".join(d.dropped) if d.dropped else "no size set kept its gain"
        emit(TuneEvent("status", f"per-shape dispatch: the confirmation did not hold the gains ({why}); "
                                 "one configuration"))
        if sid is not None:
            store.put_step(sid, "plan", "per-shape dispatch not kept: the confirmation did not hold its gains",
                           {"action": "dispatch", "search": d.to_dict()})
        return None
    head = (f"per-shape dispatch: {confirmed.speedup:.2f}x against {confirmed.single_speedup:.2f}x for one "
            "configuration (confirmed)")
    lines = [f"per-shape dispatch #{i + 1}: {x}" for i, x in enumerate(dsp.describe(confirmed))]
    for line in [head] + lines:
        emit(TuneEvent("status", line))
    text = "\n".join([head] + lines)
    if sid is not None:
        store.put_step(sid, "dispatch", text, confirmed.to_dict())
    return confirmed


def _profile(backend: Backend, r) -> dict | None:
    """The ncu profile of a round's best variant, where the backend can take one."""
    prof = getattr(backend, "profile", None)
    if prof is None or r.best is None or getattr(r, "best_variant", None) is None:
        return None
    try:
        return prof(r.best_variant)
    except Exception as e:  # profiling is advisory: never lose a round to it
        return {"error": str(e)}
