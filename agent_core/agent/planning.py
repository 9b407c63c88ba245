"""Analysis of a tuning round and the rule-based planner that chooses the next step.

``analyze`` turns a round's summary (and, where available, the ncu profile of its best variant) into the
"why" a user reads: achieved bandwidth against the device's copy bandwidth, registers and spills,
theoretical occupancy and its limiter, what failed. A ``Planner`` turns the rounds so far into the next
``Step``; ``RuleBasedPlanner`` is deterministic and offline, the LLM planner (agent_core.agent.llm) implements
the same protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agent_core.model import KernelTemplate, params_words
from agent_core.templating.experts.binding import cluster_twin_name
from agent_core.templating.space import served_size_sets

STOP_PCT_OF_COPY = 90.0  # memory-bound kernels: stop at this % of the device's copy bandwidth
CONTINUE_GAIN = 0.01  # a continued search goes on only while a continuation raises the run's best by 1%
LAG_PCT_OF_COPY = 50.0  # a size set below this % is worth a template made for its regime (per-shape dispatch)


@dataclass
class Analysis:
    text: str  # plain words, one finding a line
    data: dict = field(default_factory=dict)


@dataclass
class Step:
    action: str  # "search" | "switch_template" | "widen" | "stop"
    reason: str
    template: KernelTemplate | None = None  # for search / switch_template / widen
    budget: int | None = None
    skipped: list[str] = field(default_factory=list)  # templates not searched because they cannot win, and why


@dataclass
class Round:
    index: int
    template: KernelTemplate
    summary: dict
    analysis: Analysis
    step: Step


class Planner(Protocol):
    name: str
    reads_profile: bool  # whether the analysis' ncu profile informs its steps (else the loop profiles less)

    def plan(self, rounds: list[Round], candidates: list[KernelTemplate]) -> Step:
        """The next step, given the finished rounds and the templates not yet tried."""


def analyze(summary: dict, profile: dict | None = None) -> Analysis:
    """Findings of one round from its summary (agent_core.search.tuner) and an optional ncu profile."""
    lines: list[str] = []
    data: dict = {}
    pct = summary.get("pct_copy") or []
    if pct:
        # judge by the largest size set: small ones are launch- or cache-bound
        i = max(range(len(pct)), key=lambda j: summary["bytes"][j])
        data["pct_copy"] = pct[i]
        data["gbps"] = summary["gbps"][i]
        lines.append(f"best variant moves {summary['gbps'][i]:.0f} GB/s on the largest size set: "
                     f"{pct[i]:.0f}% of the device's copy bandwidth ({summary.get('copy_bw_gbps', 0):.0f} GB/s)")
        opct = (summary.get("original_pct_copy") or [None] * len(pct))[i]
        if opct is not None:
            data["original_pct_copy"] = opct
            lines.append(f"the original reached {opct:.0f}%")
    if summary.get("speedup"):
        data["speedup"] = summary["speedup"]
        lines.append(f"speedup {summary['speedup']:.2f}x with {params_words(summary.get('best_params'))}")
    res = summary.get("best_resources") or {}
    if res:
        data.update({k: res.get(k) for k in ("registers", "spill_stores", "spill_loads", "occupancy",
                                              "static_smem", "blocks_per_sm")})
        occ = res.get("occupancy")
        lines.append(f"{res.get('registers')} registers/thread, {res.get('static_smem', 0)} B static shared memory"
                     + (f", theoretical occupancy {occ * 100:.0f}%" if occ is not None else ""))
        if res.get("spill_stores") or res.get("spill_loads"):
            lines.append(f"register spills: {res.get('spill_stores')} B stored, {res.get('spill_loads')} B loaded")
    counts = summary.get("counts") or {}
    data["counts"] = counts
    if counts.get("failed"):
        kinds: dict[str, int] = {}
        for f in summary.get("failures", []):
            kinds[f["status"]] = kinds.get(f["status"], 0) + 1
        lines.append(f"{counts['failed']} variants failed (" + ", ".join(f"{v} {k}" for k, v in kinds.items()) + ")")
    if counts.get("pruned"):
        lines.append(f"{counts['pruned']} configurations pruned before running (hardware limits or constraints)")
    if profile and profile.get("skipped"):
        lines.append(f"ncu: not profiled ({profile['skipped']})")
    elif profile:
        data["profile"] = profile
        for key, label in (("dram_pct", "DRAM throughput"), ("achieved_occupancy_pct", "achieved occupancy")):
            if profile.get(key) is not None:
                lines.append(f"ncu: {label} {profile[key]:.0f}% of peak")
        if profile.get("top_stalls"):
            lines.append("ncu: top stalls " + ", ".join(profile["top_stalls"][:3]))
    if not lines:
        missed = counts.get("not_recorded")
        lines.append(f"nothing measured: the recording replayed has none of this template's {missed} configurations "
                     "tried" if missed else "no variant verified in this round")
    return Analysis("\n".join(lines), data)


def _at_edge(summary: dict, template: KernelTemplate) -> list[str]:
    """Parameters whose best value sits at the edge of their domain."""
    best = summary.get("best_params") or {}
    edge = []
    for name, p in template.space.params.items():
        if p.closed:
            continue  # the template supports no other value
        if name in best and len(p.values) > 1 and best[name] in (min(p.values), max(p.values)):
            edge.append(name)
    return edge


def _twin_of(t: KernelTemplate, untried: list[KernelTemplate]) -> KernelTemplate | None:
    """The cluster twin (``expert:<name>_cluster``) of expert template ``t`` among ``untried``, where the twin is
    not made for a regime of sizes (those wait for size sets that lag): the same binding, done another way for
    every size (softmax_long reads a row twice; its twin once, from the registers of a cluster's blocks)."""
    if not t.origin.startswith("expert:"):
        return None
    want = "expert:" + cluster_twin_name(t.origin.removeprefix("expert:"))
    return next((c for c in untried if c.origin == want), None)


def widen(template: KernelTemplate, names: list[str], summary: dict) -> KernelTemplate | None:
    """A copy of the template with the named integer domains extended by one power-of-two step past the
    edge the best value sits on; None when nothing can be widened."""
    import copy
    best = summary.get("best_params") or {}
    t = copy.deepcopy(template)
    changed = False
    for n in names:
        p = t.space.params[n]
        if p.closed:
            continue  # the template supports no other value
        v = best[n]
        lo, hi = min(p.values), max(p.values)
        if v == hi and p.kind not in ("block_size", "warps_per_block", "launch_bounds") and hi * 2 <= 1 << 20:
            p.values = sorted(set(p.values) | {hi * 2})
            changed = True
        elif v == lo and lo > 1 and lo % 2 == 0:
            p.values = sorted(set(p.values) | {lo // 2})
            changed = True
    return t if changed else None


class RuleBasedPlanner:
    """Deterministic offline planner.

    1. First round: the best-matching expert template where one matched (the family's known-good code reaches
       a good result soonest), else the structural template of the user's own kernel.
    2. Stop when a memory-bound kernel reaches STOP_PCT_OF_COPY % of the copy bandwidth, unless (with the per-shape
       dispatch) a template made for a regime of sizes (``serves``: few rows) has size sets to serve that are below
       LAG_PCT_OF_COPY %: search it first; the dispatch gives it those size sets if it wins them.
    3. Otherwise the last round's expert's cluster twin where it is not a regime template (it serves every size);
       else try the next candidate not yet searched (the structural template, then the semantic rewrite of the
       user's kernel, then further experts; regime templates only as in 2).
    4. Otherwise a regime template as in 2.
    5. Otherwise widen a domain whose best value sits on its edge (once per template).
    6. Otherwise go on searching the best template with configurations left (``_continue``: the search
       resumes where it stopped with another round's budget, its measured configurations found in the store),
       while the last continuation gained.
    7. Otherwise stop.
    """

    name = "rules"
    reads_profile = False  # its steps follow bandwidth, resources and counts, never the ncu profile

    def __init__(self, budget_per_round: int = 40, dispatch: bool = True):
        self.budget = budget_per_round
        self.dispatch = dispatch

    def _regime(self, rounds: list[Round], candidates: list[KernelTemplate]) -> Step | None:
        """A regime template not yet searched whose size sets lag in the best round so far. Those that cannot win
        (their size sets already run at LAG_PCT_OF_COPY % or more, or the original already runs them at
        STOP_PCT_OF_COPY %) are noted in ``self.skipped`` with the reason."""
        if not self.dispatch:
            return None
        tried = {r.template.template_hash for r in rounds}
        ok = [r for r in rounds if r.summary.get("speedup")]
        if not ok:
            return None
        best = max(ok, key=lambda r: r.summary["speedup"])
        pct, sizes = best.summary.get("pct_copy") or [], best.summary.get("sizes") or []
        opct = best.summary.get("original_pct_copy") or []

        def words(idx: list[int], of: list) -> str:
            return "; ".join(f"{', '.join(f'{k}={v}' for k, v in sizes[i].items())} ({of[i]:.0f}%)" for i in idx)
        for c in candidates:
            if not c.serves or c.template_hash in tried:
                continue
            served = [i for i in served_size_sets(c, sizes) if i < len(pct) and pct[i] is not None]
            lag = [i for i in served if pct[i] < LAG_PCT_OF_COPY]
            fast_orig = [i for i in served if i < len(opct) and opct[i] is not None and opct[i] >= STOP_PCT_OF_COPY]
            if served and len(fast_orig) == len(served):
                self.skipped.append(f"{c.origin}: the original already runs its size sets at "
                                    f"{STOP_PCT_OF_COPY:.0f}% of copy bandwidth or more ({words(served, opct)})")
                continue
            if served and not lag:
                self.skipped.append(f"{c.origin}: its size sets already run at {LAG_PCT_OF_COPY:.0f}% of copy "
                                    f"bandwidth or more ({words(served, pct)}); it is searched only where they lag")
                continue
            if lag:
                what = ", ".join(f"{', '.join(f'{k}={v}' for k, v in sizes[i].items())} ({pct[i]:.0f}%)" for i in lag)
                return Step("switch_template", f"size sets the {c.origin} template is made for lag below "
                                               f"{LAG_PCT_OF_COPY:.0f}% of copy bandwidth: {what}; search it for the "
                                               "per-shape dispatch", c, self.budget)
        return None

    def plan(self, rounds: list[Round], candidates: list[KernelTemplate]) -> Step:
        """The next step (class docstring); its ``skipped`` lists the templates left out because they cannot win,
        and a stop's reason names them."""
        self.skipped: list[str] = []
        step = self._plan(rounds, candidates)
        step.skipped = list(self.skipped)
        if step.action == "stop" and step.skipped:
            step.reason += "; not searched (cannot win): " + "; ".join(step.skipped)
        return step

    def _plan(self, rounds: list[Round], candidates: list[KernelTemplate]) -> Step:
        if not rounds:
            if not candidates:
                return Step("stop", "nothing to tune: no template for this kernel")
            experts = [c for c in candidates if c.origin.startswith("expert:") and not c.serves]
            if experts:
                first = experts[0]
                return Step("search", f"search the {first.origin} template first: the kernel's structure matches "
                                      "its family", first, self.budget)
            first = candidates[0]
            return Step("search", f"search the {first.origin} template of the kernel first", first, self.budget)
        last = rounds[-1]
        best_pct = max((r.analysis.data.get("pct_copy") or 0) for r in rounds)
        if best_pct >= STOP_PCT_OF_COPY:
            return self._regime(rounds, candidates) or Step(
                "stop", f"reached {best_pct:.0f}% of the device's copy bandwidth (memory-bound; the stop rule is "
                        f"{STOP_PCT_OF_COPY:.0f}%)")
        tried = {r.template.template_hash for r in rounds}
        twin = _twin_of(last.template, [c for c in candidates if c.template_hash not in tried and not c.serves])
        if twin is not None:
            return Step("switch_template", f"{best_pct:.0f}% of copy bandwidth so far: try the {twin.origin} template, "
                                           f"the {last.template.origin} template's twin for every size", twin,
                        self.budget)
        for c in candidates:
            if c.template_hash not in tried and not c.serves:
                return Step("switch_template", f"{best_pct:.0f}% of copy bandwidth so far: try the {c.origin} "
                                               "template", c, self.budget)
        regime = self._regime(rounds, candidates)
        if regime is not None:
            return regime
        edge = _at_edge(last.summary, last.template)
        if edge and last.step.action != "widen":
            w = widen(last.template, edge, last.summary)
            if w is not None:
                return Step("widen", f"best value of {', '.join(edge)} is at the edge of its domain: widen it",
                            w, self.budget)
        more = self._continue(rounds)
        if more is not None:
            return more
        return Step("stop", f"no further step: {best_pct:.0f}% of copy bandwidth, every candidate template tried"
                    + (f"; {self.no_more}" if self.no_more else ""))

    def _continue(self, rounds: list[Round]) -> Step | None:
        """The best template whose search has configurations left, searched on: the same search (strategy, seed)
        with its budget raised by one round's, so the configurations it measured come back from the store at no
        cost and the strategy, told them again, goes on from there. A template is passed over where its space
        holds no configuration it has not tried or its search stopped short of its budget; nothing after a
        continuation that did not raise the run's best by CONTINUE_GAIN (``self.no_more`` says why)."""
        self.no_more = ""
        ok = [r for r in rounds if r.summary.get("speedup")]
        if not ok:
            return None
        last = rounds[-1]
        earlier = [r for r in rounds[:-1] if r.template.template_hash == last.template.template_hash]
        if earlier:  # the last round continued a search: go on only where it gained
            before = max((r.summary.get("speedup") or 0) for r in rounds[:-1])
            if (last.summary.get("speedup") or 0) < before * (1 + CONTINUE_GAIN):
                self.no_more = (f"searching the {last.template.origin} template further gained less than "
                                f"{CONTINUE_GAIN:.0%}")
                return None
        latest: dict[str, Round] = {}  # each template's last round (a continuation holds the ones before it)
        for r in ok:
            latest[r.template.template_hash] = r
        why = []
        for best in sorted(latest.values(), key=lambda r: -r.summary["speedup"]):
            t = best.template
            counts = best.summary.get("counts") or {}
            tried = (counts.get("measured") or 0) + (counts.get("pruned") or 0)
            budget = int(best.summary.get("budget") or best.step.budget or self.budget)
            if t.space.size() <= tried:
                why.append(f"the {t.origin} template's space is searched through")
                continue
            if tried < budget:  # the search ended before its budget: its strategy had nothing more to ask
                why.append(f"the {t.origin} template's search asked every configuration it would")
                continue
            return Step("search", f"{best.summary['speedup']:.2f}x with the {t.origin} template, every candidate "
                                  f"template tried: search it further ({budget + self.budget} evaluations, the "
                                  f"{tried} measured found in the store)", t, budget + self.budget)
        self.no_more = "; ".join(why)
        return None
