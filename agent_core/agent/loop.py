"""The optimize loop: templating, testing, analysis, planning — round after round.

Each round is one tuning session (agent_core.search.tuner) over one template: the user's kernel parameterized
structurally, the user's kernel rewritten (agent_core.templating.rewrites: vectors, warp reductions, ...), an expert template bound to the user's signature (agent_core.templating.experts), or a template an LLM
proposed (agent_core.agent.llm). After each round the analysis says what limits the best variant and the planner
chooses the next step; both are written to the store as the session's steps, so the user can read how the
result was reached. After the last round, the per-shape dispatch (agent_core.agent.dispatch) gives each size set
that another verified configuration serves clearly faster than the winner that configuration.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from agent_core.measure import timeline as tl
from agent_core.measure.backend import Backend
from agent_core.model import KernelTemplate, KerntuneError, NoGpuError, TuningSpec, params_key, params_words
from agent_core.agent.planning import Planner, Round, RuleBasedPlanner, Step, analyze
from agent_core.store import Store
from agent_core.search.tuner import (EARLY_STOP_AFTER, Prepared, TuneEvent, TuneOptions, TuneResult, confirm_configs,
                                     prepare, structural_reason, tune)

if TYPE_CHECKING:
    from agent_core.agent.dispatch import Dispatch
    from agent_core.agent.screen import Screening

# A test designer gives the spec to verify and time a template on (extra size sets, input distributions), or None.
TestDesigner = Callable[[Prepared, KernelTemplate], "TuningSpec | None"]
# A templater proposes extra templates for a kernel (expert bindings, LLM proposals) given the rounds so far.
Templater = Callable[[Prepared, list[Round]], list[KernelTemplate]]


@dataclass
class AgentOptions:
    budget_per_round: int = 40
    max_rounds: int = 4
    total_budget: int | None = None  # evaluations over all rounds
    time_budget_s: float | None = None  # seconds for the whole run: no round starts after it, a round ends at it
    early_stop_after: int | None = EARLY_STOP_AFTER  # a round ends when its best stalls this long (None: never)
    strategy: str = "auto"
    seed: int = 0
    use_experts: bool = True
    dispatch: bool = True  # after the rounds: a configuration of its own for size sets the winner serves badly


@dataclass
class AgentResult:
    rounds: list[Round] = field(default_factory=list)
    final_step: Step | None = None
    dispatch: "Dispatch | None" = None  # per-shape dispatch over every round's verified configurations
    screening: "Screening | None" = None  # the expert bindings checked before round 1
    timeline: dict | None = None  # where the run's time went (agent_core.measure.timeline.Timeline.report)

    @property
    def best(self) -> Round | None:
        ok = [r for r in self.rounds if r.summary.get("speedup")]
        return max(ok, key=lambda r: r.summary["speedup"]) if ok else None


def expert_templater(prep: Prepared, rounds: list[Round]) -> list[KernelTemplate]:
    """Expert templates whose family the kernel's structure suggests, bound to its signature (the likeliest
    binding of each). In ``optimize``'s templaters it stands for the screened experts: every plausible binding
    is checked before round 1 (agent_core.agent.screen) and the loop tunes the bindings that verified."""
    from agent_core.templating import experts
    out = []
    for m in experts.match(prep.cf, prep.kernel.name, prep.spec):
        try:
            out.append(experts.bind(m, prep.cf, prep.spec))
        except KerntuneError:
            continue
    return out


def _screen_experts(prep: Prepared, backend: Backend, emit: Callable[[TuneEvent], None], cancel: threading.Event,
                    seed: int, result: AgentResult, originals: dict | None = None) -> list[KernelTemplate] | None:
    """The expert templates to offer the planner, screened (one cheap check per binding); None when screening
    could not run (the loop then offers the likeliest binding of each expert, unchecked)."""
    from agent_core.agent.screen import screen
    try:
        result.screening = screen(prep, backend, lambda s: emit(TuneEvent("status", s)), cancel, seed=seed,
                                  originals=originals)
    except NoGpuError:
        raise
    except KerntuneError as e:
        emit(TuneEvent("status", f"expert screening skipped ({e.message}); the likeliest binding of each expert "
                                 "is searched unchecked"))
        return None
    return result.screening.templates


def _record_screening(store: Store, session_id: int | None, screening: "Screening | None") -> None:
    """Each screening verdict as a ``screen`` step (of round 1's session), the binding in words."""
    if screening is None or screening.recorded:
        return
    for v in screening.verdicts:
        store.put_step(session_id, "screen", v.words(screening.sizes_text), v.to_dict(screening.size_set))
    screening.recorded = True


def rewrite_templater(prep: Prepared, rounds: list[Round]) -> list[KernelTemplate]:
    """The semantic rewrite template of the user's own kernel (agent_core.templating.rewrites), composed onto its
    structural template, then its twins (a rewrite done another way, e.g. over a thread-block cluster); none when
    no rewrite applies."""
    from agent_core.templating.rewrites import compose
    got = compose(prep.cf, prep.kernel.name, prep.spec, prep.structural)
    return [got.template] + got.twins if got.template is not None else []


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
    too. When the backend cannot measure them (a replay recorded without them), the round uses the spec.
    Where the time went is in ``timeline`` of the result and stored as a ``timeline`` step of the last round's
    session (when this call owns the run: not inside another timed run)."""
    with tl.run_scope() as (timeline, own_run):
        result = _optimize(path, kernel, backend, store, options, planner, templaters, on_event, cancel, text,
                           test_designer)
        if own_run:
            timeline.finish()
            result.timeline = timeline.report()
            sid = result.rounds[-1].summary.get("session_id") if result.rounds else None
            if sid is not None:
                store.put_step(sid, "timeline", tl.render(result.timeline), result.timeline)
    return result


def _optimize(path, kernel, backend, store, options, planner, templaters, on_event, cancel, text,
              test_designer) -> AgentResult:
    opt = options or AgentOptions()
    started = time.monotonic()
    planner = planner or RuleBasedPlanner(opt.budget_per_round, dispatch=opt.dispatch)
    cancel = cancel or threading.Event()
    emit = on_event or (lambda e: None)
    with tl.phase("prepare"):
        prep = prepare(path, kernel, text)
    candidates: list[KernelTemplate] = [prep.template] if prep.template is not None else []
    if prep.template is None:  # the other templaters (experts, rewrites, the LLM) still have the kernel
        emit(TuneEvent("status", f"structural template: none ({structural_reason(prep)})"))
    if templaters is None:
        templaters = [rewrite_templater] + ([expert_templater] if opt.use_experts else [])
    result = AgentResult()
    originals: dict = {}  # the original timed once in this run, per device and spec (TuneOptions.originals)
    if expert_templater in templaters:
        screened = _screen_experts(prep, backend, emit, cancel, opt.seed, result, originals)
        if screened is not None:
            templaters = [(lambda p, r, ts=screened: list(ts)) if t is expert_templater else t for t in templaters]
    spent = 0
    verified: list[tuple[KernelTemplate, TuneResult]] = []  # the rounds searched on the spec's own size sets
    skipped: list[KernelTemplate] = []  # templates the device cannot run
    for i in range(opt.max_rounds + 1):
        for t in templaters:
            try:
                with tl.phase("templates"):
                    proposed = t(prep, result.rounds)
                for c in proposed:
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
        with tl.phase("plan"):
            step = planner.plan(result.rounds, [c for c in candidates if c.template_hash not in tried]
                                if result.rounds else candidates)
        left_s = None if opt.time_budget_s is None else opt.time_budget_s - (time.monotonic() - started)
        if left_s is not None and left_s <= 0 and step.action != "stop" and result.rounds:
            step = Step("stop", f"time budget of {opt.time_budget_s:.0f} s for the run spent (the planner's next "
                                f"step was: {step.action}: {step.reason})")
        emit(TuneEvent("status", f"plan: {step.action}: {step.reason}"))
        if step.action != "stop":
            for why in getattr(step, "skipped", None) or []:
                emit(TuneEvent("status", f"plan: not searched (cannot win): {why}"))
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
        topt = TuneOptions(budget=budget, time_budget_s=max(0.0, left_s) if left_s is not None else None,
                           strategy=opt.strategy, seed=opt.seed, early_stop_after=opt.early_stop_after,
                           originals=originals)
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
            if isinstance(e, NoGpuError):
                raise
            if prepared.spec is prep.spec:
                if not result.rounds:
                    raise
                # this template cannot be tuned (a template it makes of the kernel that the spec cannot
                # instantiate, ...): the rounds before stand; the planner goes on without it
                emit(TuneEvent("status", f"the {step.template.origin} template could not be tuned ({e.message}); "
                                         "the rounds before it stand"))
                candidates = [c for c in candidates if c.template_hash != step.template.template_hash]
                skipped.append(step.template)
                continue
            emit(TuneEvent("status", f"the designed size sets cannot be measured here ({e.message}); "
                                     "searching on the spec's"))
            r = tune(path, kernel, backend, store, topt, on_event=on_event, cancel=cancel,
                     prepared=replace(prep, template=step.template))
        spent += r.summary["counts"]["measured"] - r.summary["counts"].get("reused", 0)  # found in the store: free
        if prepared.spec is prep.spec:
            verified.append((step.template, r))
        profile = _profile(backend, r) if _worth_profiling(planner, result.rounds, r) else {
            "skipped": "the round did not beat the run's best; the planner does not read ncu"}
        with tl.phase("plan"):
            analysis = analyze(r.summary, profile)
        sid = r.session_id
        if i == 0:
            _record_screening(store, sid, result.screening)
        store.put_step(sid, "plan", f"{step.action}: {step.reason}", {
            "action": step.action, "origin": step.template.origin, "skipped": getattr(step, "skipped", None) or []})
        store.put_step(sid, "analysis", analysis.text, analysis.data)
        result.rounds.append(Round(i, step.template, r.summary, analysis, step))
        emit(TuneEvent("status", f"round {i + 1} ({step.template.origin}): " + analysis.text.splitlines()[0]))
        if r.status == "cancelled":
            result.final_step = Step("stop", "cancelled")
            break
    if not result.rounds:  # no round to attach the screening to: kept without a session
        _record_screening(store, None, result.screening)
    over_time = opt.time_budget_s is not None and time.monotonic() - started >= opt.time_budget_s
    if opt.dispatch and result.best is not None and not cancel.is_set() and over_time:
        # the dispatch needs no search: it chooses among the configurations already measured and confirms them (a
        # few seconds), where one configuration for every size could keep the original everywhere and lose the
        # measured gains (a decode softmax, 2026-11-29: 3.33x on its big shape, the original kept everywhere)
        emit(TuneEvent("status", f"per-shape dispatch: from the configurations already measured (the time budget "
                                 f"of {opt.time_budget_s:.0f} s for the run is spent: no further search)"))
    if result.best is not None and not cancel.is_set():
        result.dispatch = per_shape_dispatch(prep, result, verified, backend, store, emit, cancel, originals,
                                             per_shape=opt.dispatch)
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
                       cancel: threading.Event, originals: dict | None = None, per_shape: bool = True
                       ) -> "Dispatch | None":
    """The dispatch over the verified configurations of every round whose template the rewrite can hold several
    configurations of (an expert's or an LLM's partial template, the kernel's own structural template), against
    the best round's winner; confirmed interleaved with the original, with the original kernel serving every size
    set where no configuration is faster beyond the measured noise, and recorded as a step of the last round's
    session. ``per_shape`` False (``--no-dispatch``): one configuration, the winner, unless it is slower than the
    original on some size set; then the original everywhere. None when the winner serves every size set."""
    from agent_core.agent import dispatch as dsp
    from agent_core.templating.text_kind import can_dispatch
    best = result.best
    wt = best.template
    wkey = (wt.template_hash, params_key(best.summary["best_params"]))
    original_params = prep.structural.space.original_config() if prep.structural is not None else {}
    templates = {wt.template_hash: wt}
    cands = []
    same = []  # every verified configuration of the winner's template (one of them may serve where the winner may not)
    for t, r in verified:
        held = can_dispatch(t, prep.cf)
        if not r.original or not (held or t.template_hash == wt.template_hash):
            continue
        templates[t.template_hash] = t
        orig = [x.median_us for x in r.original]
        for ev in r.evaluations:
            if ev.ok and len(ev.timings) == len(orig) and all(x is not None for x in ev.timings):
                c = dsp.Candidate(t.template_hash, t.origin, dict(ev.params), [x.median_us for x in ev.timings], orig)
                if held or c.key == wkey:
                    cands.append(c)
                if t.template_hash == wt.template_hash:
                    same.append(c)
    held = can_dispatch(wt, prep.cf)
    own = prep.structural
    if held and own is not None and own.template_hash in templates:
        # configurations of the kernel's own template that change a value it shares with other code (a namespace
        # constant the launcher reads too) cannot be kernels of their own beside the others: only the winner, alone
        from agent_core.apply import dispatch_fixed_params
        fixed = dispatch_fixed_params(own, prep.cf, prep.kernel, prep.spec)
        if fixed:
            base = own.space.original_config()

            def moves(c) -> bool:
                return c.template_hash == own.template_hash and any(c.params.get(p) != base.get(p) for p in fixed)
            if any(moves(c) for c in cands if c.key == wkey):
                held = False
                cands = [c for c in cands if c.key == wkey]
            else:
                cands = [c for c in cands if not moves(c)]
    if held and prep.kernel.template_params:
        from agent_core.apply import templated_dispatch_refusal
        refusal = templated_dispatch_refusal(prep.cf, prep.kernel, prep.spec, [t for t in templates.values()])
        if refusal:
            held = False
            cands = [c for c in cands if c.key == wkey]
    d = None
    inputs = None
    if per_shape and held:
        from agent_core.apply import dispatch_inputs
        inputs = dispatch_inputs(prep.cf, prep.kernel.name, prep.spec, original_params)
        d = dsp.choose(cands, (wt.template_hash, best.summary["best_params"]), prep.spec.sizes, inputs=inputs)
        if d is None:
            emit(TuneEvent("status", "per-shape dispatch: no size set is served at least "
                                     f"{dsp.MIN_GAIN:.0%} faster by another verified configuration"))
    elif per_shape:
        emit(TuneEvent("status", f"per-shape dispatch: not offered, {_one_configuration_why(wt, prep)}"))
    if d is None:
        w = next((c for c in cands if c.key == wkey), None)
        if w is None or len(prep.spec.sizes) < 1:
            return None
        d = dsp.single(w, prep.spec.sizes, inputs)
        emit(TuneEvent("status", "no regression: confirming the winner against the original on every size set"))
    else:
        emit(TuneEvent("status", f"per-shape dispatch: {len(d.entries)} configurations ({d.speedup:.2f}x against "
                                 f"{d.single_speedup:.2f}x in the search); confirming them against the original"))
    todo = list({e.key: e for e in d.entries + [d.winner]}.values())  # the winner is often entry 0: time it once
    sid = result.rounds[-1].summary.get("session_id")
    try:
        figures = dict(zip([e.key for e in todo], confirm_configs(
            prep, backend, [(templates[e.template_hash], e.params) for e in todo], cancel=cancel,
            originals=originals)))
    except KerntuneError as e:  # the rounds stand; only the dispatch is not offered
        why = "cancelled" if cancel.is_set() else e.message
        emit(TuneEvent("status", f"per-shape dispatch: not confirmed ({why}); one configuration"))
        if sid is not None:
            store.put_step(sid, "plan", f"per-shape dispatch not kept: its confirmation failed ({why})",
                           {"action": "dispatch", "search": d.to_dict()})
        return None
    confirmed = dsp.confirm(d, lambda e: figures[e.key], original_params=original_params)
    if confirmed is None and len(d.entries) == 1 and per_shape and not held:
        # the winner alone, faster everywhere, but written back whole: the other templates' dispatch where it gains more
        o, v = figures[d.winner.key]
        instead = _others_instead(prep, result, verified, backend, store, emit, cancel, originals, wkey, wt, sid,
                                  math.exp(sum(math.log(a.median_us / b.median_us) for a, b in zip(o, v)) / len(o)))
        if instead is not None:
            return instead
    if confirmed is None:
        why = "; ".join(d.dropped) if d.dropped else "no size set kept its gain"
        emit(TuneEvent("status", ("per-shape dispatch: the confirmation did not hold the gains "
                                  f"({why}); " if len(d.entries) > 1 else "") + "one configuration, faster than "
                       "the original beyond the measured noise on every size set (confirmed)"))
        if sid is not None and len(d.entries) > 1:
            store.put_step(sid, "plan", "per-shape dispatch not kept: the confirmation did not hold its gains",
                           {"action": "dispatch", "search": d.to_dict()})
        return None
    confirmed.backend = getattr(backend, "name", "")
    if (not per_shape or not held) and not confirmed.applies_nothing:
        # one configuration for every size: the winner where it is slower than the original nowhere
        if not confirmed.single_slower:
            # kept as a one-configuration dispatch with its confirmed figures: apply and the result table read the
            # same verdict (without it apply judged the search's figures against the 1% floor alone)
            msg = (f"one configuration: not faster than the original beyond the noise on "
                   f"{len(confirmed.original_kept)} size set(s), but slower on none (confirmed)")
            emit(TuneEvent("status", msg))
            # d is dsp.single(w, ...): one configuration for every size is always the winner's candidate w
            one = dsp.one_configuration(w, figures[d.winner.key], d.winner, figures[d.winner.key], prep.spec.sizes, "")
            one.backend, one.inputs = confirmed.backend, list(d.inputs)
            if per_shape and not held:
                instead = _others_instead(prep, result, verified, backend, store, emit, cancel, originals, wkey, wt,
                                          sid, one.speedup)
                if instead is not None:
                    return instead
            if sid is not None:
                store.put_step(sid, "dispatch", msg, one.to_dict())
            return one
        where = ", ".join(dsp.size_label(prep.spec.sizes[i]) for i in confirmed.single_slower)
        one = "--no-dispatch" if held else _one_configuration_why(wt, prep)
        why = (f"one configuration must serve every size ({one}), and the best one "
               f"({params_words(best.summary['best_params'])}) is slower than the original on {where} beyond the "
               "noise")
        alt = _slower_nowhere(prep, backend, templates, same, d.winner, figures[d.winner.key], why, emit, cancel,
                              originals, original_params if own is not None and wt.template_hash == own.template_hash
                              else None)
        instead = _dispatch_instead(prep, result, verified, backend, store, emit, cancel, originals, wkey, why,
                                    record=False) if per_shape else None
        if instead is not None and (alt is None or instead.speedup > alt.speedup):
            # the other templates' dispatch gains more than any one configuration of the winner's template
            _record_in_place(store, sid, instead, wkey)
            return instead
        if alt is not None:
            emit(TuneEvent("status", f"one configuration: {alt.instead}"))
            if sid is not None:
                store.put_step(sid, "dispatch", f"one configuration: {alt.instead}", alt.to_dict())
            return alt
        confirmed = dsp.original_only(confirmed, original_params, why + ": the original kernel is kept")
    if confirmed.applies_nothing:
        head = "no regression: the original kernel is kept on every size set (nothing to apply)"
    elif confirmed.original_kept:
        head = (f"per-shape dispatch: {confirmed.speedup:.2f}x against {confirmed.single_speedup:.2f}x for one "
                f"configuration (confirmed); the original kernel kept on {len(confirmed.original_kept)} size set(s)")
    else:
        head = (f"per-shape dispatch: {confirmed.speedup:.2f}x against {confirmed.single_speedup:.2f}x for one "
                "configuration (confirmed)")
    lines = [f"per-shape dispatch #{i + 1}: {x}" for i, x in enumerate(dsp.describe(confirmed))]
    lines += [f"original kept: {x}" for x in confirmed.kept]
    for line in [head] + lines:
        emit(TuneEvent("status", line))
    text = "\n".join([head] + lines)
    if sid is not None:
        store.put_step(sid, "dispatch", text, confirmed.to_dict())
    return confirmed


def _others_instead(prep: Prepared, result: AgentResult, verified: list, backend: Backend, store: Store,
                    emit: Callable[[TuneEvent], None], cancel: threading.Event, originals: dict | None, wkey: tuple,
                    wt: KernelTemplate, sid, winner_speedup: float) -> "Dispatch | None":
    """Where the winner can only be one configuration for every size (written back whole) and is slower than the
    original nowhere: the other templates' per-shape dispatch (the original where none of them is faster), confirmed,
    where it gains more than the winner alone beyond the noise (recorded in the winner's place); else None."""
    from agent_core.agent import dispatch as dsp
    instead = _dispatch_instead(prep, result, verified, backend, store, emit, cancel, originals, wkey,
                                _one_configuration_why(wt, prep), record=False)
    if instead is None or instead.speedup <= winner_speedup * (1 + dsp.NOISE_FLOOR):
        return None
    emit(TuneEvent("status", f"per-shape dispatch of the other templates: {instead.speedup:.2f}x against "
                             f"{winner_speedup:.2f}x for the winner alone (confirmed)"))
    _record_in_place(store, sid, instead, wkey)
    return instead


def _record_in_place(store: Store, sid, d: "Dispatch", wkey: tuple) -> None:
    """The dispatch that serves in the winner's place, recorded as a step of the session (``in_place_of``: apply and
    the result table find it under the winner's result)."""
    if sid is None:
        return
    data = d.to_dict()
    data["in_place_of"] = {"template_hash": wkey[0], "params": json.loads(wkey[1])}
    store.put_step(sid, "dispatch", f"per-shape dispatch in place of the winner: {d.instead}", data)


ALTERNATIVES = 2  # configurations confirmed, at most, in search of one that is slower than the original nowhere


def _dispatch_instead(prep: Prepared, result: AgentResult, verified: list[tuple[KernelTemplate, TuneResult]],
                      backend: Backend, store: Store, emit: Callable[[TuneEvent], None], cancel: threading.Event,
                      originals: dict | None, wkey: tuple, why: str, record: bool = True) -> "Dispatch | None":
    """Where the search's winner can only be written as one configuration for every size (a templated kernel's own
    template, a structural template written back whole) and either is slower than the original on some size set
    with no other configuration of its template slower nowhere, or gains less than this would: the per-shape
    dispatch over the other rounds' verified configurations that a rewrite can hold (an expert's, a rewrite's), the
    original kernel serving every size set none of them is faster on, confirmed like any dispatch. Recorded for the
    winner (``_record_in_place``) unless ``record`` is False (the caller compares it first); None where no other
    template verified or the dispatch would apply nothing."""
    from agent_core.templating.text_kind import can_dispatch
    rest = [(t, r) for t, r in verified if t.template_hash != wkey[0] and can_dispatch(t, prep.cf)]
    hashes = {t.template_hash for t, _ in rest}
    sub = AgentResult(rounds=[x for x in result.rounds if x.template.template_hash in hashes])
    if sub.best is None or cancel.is_set():
        return None
    emit(TuneEvent("status", f"per-shape dispatch: {why}; trying the configurations of the other templates the "
                             "rewrite can hold, with the original kernel where none is faster"))
    d = per_shape_dispatch(prep, sub, rest, backend, store, emit, cancel, originals, per_shape=True)
    if d is None or d.applies_nothing:
        return None
    d = replace(d, instead=f"{why}: the configurations of the other templates serve instead")
    sid = result.rounds[-1].summary.get("session_id")
    if record:
        _record_in_place(store, sid, d, wkey)
    return d


def _slower_nowhere(prep: Prepared, backend: Backend, templates: dict, same: list, winner, winner_timed, why: str,
                    emit: Callable[[TuneEvent], None], cancel: threading.Event, originals: dict | None,
                    original_params: dict | None = None):
    """Where one configuration must serve every size and the winner is slower than the original on some size set:
    the best other configuration of the winner's template that the search measured faster than the original on
    every size set, confirmed interleaved with the original (at most ``ALTERNATIVES`` tried, best geometric mean
    first), as a one-configuration dispatch; None when none is, under confirmation, slower nowhere and faster
    somewhere beyond the noise (a configuration that only ties the original, such as the original's own, gains
    nothing and would stand in the way of ``_dispatch_instead``)."""
    from agent_core.agent import dispatch as dsp
    seen, pool = set(), []
    for c in sorted(same, key=lambda c: sum(math.log(r) for r in c.ratio)):
        if c.params == original_params:
            continue  # the kernel's own template at the file's values: the original kernel itself
        if c.key != winner.key and c.key not in seen and all(r < 1.0 for r in c.ratio):
            seen.add(c.key)
            pool.append(c)
    for c in pool[:ALTERNATIVES]:
        emit(TuneEvent("status", f"one configuration: the winner is slower than the original somewhere; confirming "
                                 f"{params_words(c.params)} (faster than the original on every size set in the search)"))
        try:
            (o, v), = confirm_configs(prep, backend, [(templates[c.template_hash], c.params)], cancel=cancel,
                                      originals=originals)
        except KerntuneError:
            return None
        if dsp.slower_anywhere(o, v) or not any(dsp.faster(a, b) for a, b in zip(o, v)):
            continue  # slower somewhere, or faster nowhere (e.g. the original configuration itself): no gain
        words = ", ".join(f"{dsp.size_label(s)} {b.median_us / a.median_us:.2f}" for s, a, b in
                          zip(prep.spec.sizes, o, v))
        return dsp.one_configuration(c, (o, v), winner, winner_timed, prep.spec.sizes, (
            f"{why}; {params_words(c.params)} is slower nowhere (time against the original's when confirmed: "
            f"{words}) and serves every size set"))
    return None


def _worth_profiling(planner, rounds: list[Round], r) -> bool:
    """Whether a round's best variant gets an ncu profile (seconds per round): always for a planner that reads it
    (the LLM's; a planner that does not say is taken to), else only where the round beat every earlier one (the
    result's analysis keeps its profile)."""
    if getattr(planner, "reads_profile", True):
        return True
    best = max((x.summary.get("speedup") or 0.0 for x in rounds), default=0.0)
    return (r.summary.get("speedup") or 0.0) > best


def _profile(backend: Backend, r) -> dict | None:
    """The ncu profile of a round's best variant, where the backend can take one."""
    prof = getattr(backend, "profile", None)
    if prof is None or r.best is None or getattr(r, "best_variant", None) is None:
        return None
    try:
        return prof(r.best_variant)
    except Exception as e:  # profiling is advisory: never lose a round to it
        return {"error": str(e)}


def _one_configuration_why(wt: KernelTemplate, prep) -> str:
    """Why the winner is written back as one configuration (no per-shape dispatch can hold it)."""
    if prep.kernel.template_params:
        from agent_core.apply import templated_dispatch_refusal
        why = templated_dispatch_refusal(prep.cf, prep.kernel, prep.spec, [wt]) or (
            f"the winner is the {wt.origin} template of the kernel's own arguments")
        return (f"the kernel is a template ({why}): apply writes one configuration, as the explicit "
                "specialization of the instantiation the spec tunes")
    return f"the winner is the {wt.origin} template, which is written back whole (one configuration)"
