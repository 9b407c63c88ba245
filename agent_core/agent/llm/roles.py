"""The four roles — templater, test designer, analyst, planner — on the agent loop's interfaces
(agent_core.agent.loop.Templater, agent_core.agent.planning.Planner). Each renders its prompt, asks the model for a
JSON answer, validates it, feeds a rejected answer back once, then drops it. When the endpoint fails, the
role answers as if there were no model (no templates, the rule-based planner), so the session goes on
offline; after a fatal failure (unreachable, bad key, a limit spent) the model is not asked again."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Callable, TypeVar

from agent_core.source import spec as spec_mod
from agent_core.model import KernelTemplate, KerntuneError, TuningSpec
from agent_core.agent.planning import Analysis, Round, RuleBasedPlanner, Step
from agent_core.templating.space import space_to_toml, valid_configs
from . import prompts
from .client import LlmClient
from .errors import LlmError, redact, redact_obj
from .proposal import ProposalError, template_from_proposal
from .record import CallLog

T = TypeVar("T")
FEEDBACK_KINDS = {"bad_json", "schema"}  # endpoint errors worth telling the model about


def _spec_toml(spec: TuningSpec) -> str:
    args = ", ".join(json.dumps(_arg_text(a)) for a in spec.args)
    sizes = ", ".join("{ " + ", ".join(f"{k} = {v}" for k, v in s.items()) + " }" for s in spec.sizes)
    lines = [f"args = [{args}]", f"sizes = [{sizes}]", f"grid = {json.dumps(spec.grid)}",
             f"block = {json.dumps(spec.block)}", f"smem = {json.dumps(spec.smem)}"]
    return "\n".join(lines)


def _arg_text(a) -> str:
    if a.role == "scalar":
        return f"{a.name}: {a.dtype} = {a.value}"
    return f"{a.name}: {a.role} {a.dtype}[{a.size}]" + (f" ~ {a.init}" if a.init != "normal" else "")


def _round_line(r: Round) -> str:
    s = r.summary
    sp = f"{s['speedup']:.2f}x" if s.get("speedup") else "no speedup"
    pct = r.analysis.data.get("pct_copy")
    c = s.get("counts") or {}
    return (f"round {r.index + 1}: {r.step.action} the {r.template.origin} template ({r.step.reason}); {sp}"
            + (f", {pct:.0f}% of copy bandwidth" if pct is not None else "")
            + f", best {s.get('best_params')}, {c.get('ok', 0)} ok / {c.get('failed', 0)} failed / "
              f"{c.get('pruned', 0)} pruned")


class LlmRoles:
    """What the roles share: the client, the call record, whether the model is still asked."""

    def __init__(self, client: LlmClient, store=None, arch: str = "sm_90", compile_check: bool = True):
        self.client = client
        self.log = CallLog(store)
        self.arch = arch
        self.compile_check = compile_check
        self.offline: str | None = None  # why the model is no longer asked

    @property
    def spend(self):
        return self.client.spend

    def _record(self, role: str, outcome: str, text: str, attempt: int, reply=None, error: LlmError | None = None,
                proposal=None, reason: str = "", extra: dict | None = None) -> None:
        data = {"role": role, "model": self.client.settings.model, "attempt": attempt, "outcome": outcome,
                "reason": reason, "proposal": proposal, "spent": self.spend.to_dict()}
        if reply is not None:
            data["tokens"] = reply.usage()
        if error is not None:
            data["error_kind"] = error.kind
            data["fatal"] = error.fatal
        data.update(extra or {})
        key = self.client.settings.api_key  # what goes to the store never carries anything key-like
        self.log.add(redact(f"{role}: {text}", key), redact_obj(data, key))

    def call(self, role: str, messages: list[dict], validate: Callable[[object], T],
             describe: Callable[[object], str] = lambda d: "answered",
             note: Callable[[T], dict] | None = None) -> T | None:
        """Ask, validate, feed a rejection back once; None when there is no usable answer. ``note`` adds
        fields about the accepted value to its record (e.g. the hash of a proposed template)."""
        if self.offline:
            return None
        for attempt in (1, 2):
            try:
                reply = self.client.ask(role, messages)
            except LlmError as e:
                self.spend.failures += 1
                self._record(role, "error", e.message, attempt, error=e, reason=e.message)
                if e.fatal:
                    self.offline = e.message
                if attempt == 1 and e.kind in FEEDBACK_KINDS:
                    messages = messages + prompts.render("feedback", reason=e.message)
                    continue
                return None
            try:
                value = validate(reply.data)
            except KerntuneError as e:
                self.spend.failures += 1
                self._record(role, "rejected", e.message.splitlines()[0], attempt, reply, proposal=reply.data,
                             reason=e.message)
                if attempt == 1:
                    messages = messages + [{"role": "assistant", "content": reply.content}] + \
                        prompts.render("feedback", reason=e.message)
                    continue
                return None
            self._record(role, "accepted", describe(reply.data), attempt, reply, proposal=reply.data,
                         extra=note(value) if note is not None else None)
            self.last_messages = messages + [{"role": "assistant", "content": reply.content}]
            return value
        return None


class LlmTemplater:
    """An agent.Templater: proposes one template per kernel (and one more for each idea the planner asks
    for). A template whose every variant failed on the GPU is fed back to the model once."""

    name = "llm"

    def __init__(self, roles: LlmRoles):
        self.roles = roles
        self.prep = None
        self.proposed: dict[str, list[dict]] = {}  # template_hash -> the conversation that produced it
        self.fed_back: set[str] = set()
        self.asked = False

    def __call__(self, prep, rounds: list[Round]) -> list[KernelTemplate]:
        self.prep = prep
        self.roles.log.at(rounds[-1].summary.get("session_id") if rounds else None)
        if not self.asked:
            self.asked = True
            t = self.propose(prep, rounds)
            return [t] if t else []
        out = []
        for r in rounds:
            h = r.template.template_hash
            c = r.summary.get("counts") or {}
            if h in self.proposed and h not in self.fed_back and not c.get("ok") and r.summary.get("failures"):
                self.fed_back.add(h)
                fails = "; ".join(f"{f['params']}: {f['status']}: {f['error'][:300]}" for f in r.summary["failures"][:5])
                t = self._ask(prep, self.proposed[h] + prompts.render(
                    "feedback", reason=f"no variant of this template passed on the GPU ({fails})"))
                if t:
                    out.append(t)
        return out

    def propose(self, prep, rounds: list[Round], idea: str | None = None) -> KernelTemplate | None:
        """A validated template for ``prep``'s kernel (implementing ``idea`` when given), or None."""
        current = ""
        best = max((r for r in rounds if r.summary.get("speedup")), key=lambda r: r.summary["speedup"], default=None)
        if best is not None:
            current = ("The best so far, measured:\n" + _round_line(best) + "\n" + best.analysis.text +
                       "\nIts parameter space:\n```toml\n" + space_to_toml(best.template) + "\n```\n")
        msgs = prompts.render("templater", kernel=prep.kernel.name, file_name=prep.path.rsplit("/", 1)[-1],
                              kernel_source=prep.text, spec=_spec_toml(prep.spec),
                              size_names=", ".join(prep.spec.sizes[0]), current=current,
                              idea=f"Implement this idea: {idea}\n" if idea else "")
        return self._ask(prep, msgs)

    def _ask(self, prep, msgs: list[dict]) -> KernelTemplate | None:
        r = self.roles
        t = r.call("templater", msgs,
                   lambda d: template_from_proposal(d, prep, compile_check=r.compile_check, arch=r.arch),
                   describe=lambda d: f"template ({d.get('idea', '')}), params "
                                      + ", ".join(f"{p['name']}={p['values']}" for p in d.get("params", [])),
                   note=lambda t: {"template_hash": t.template_hash})
        if t is not None:
            self.proposed[t.template_hash] = r.last_messages
        return t


class LlmTestDesigner:
    """Extra size sets and input distributions that stress a template's edge cases: ``design(prep)`` gives
    the spec with them added (validated like a user's spec), or None."""

    def __init__(self, roles: LlmRoles, max_elements: int = 1 << 26, max_extra: int = 4):
        self.roles = roles
        self.max_elements = max_elements
        self.max_extra = max_extra

    def design(self, prep, template: KernelTemplate | None = None) -> TuningSpec | None:
        t = template or prep.template
        params = "\n".join(f"- {n}: values {p.values}, original {p.original} ({p.why or p.kind})"
                           for n, p in (t.space.params.items() if t else ())) or "- none"
        msgs = prompts.render("test_designer", kernel=prep.kernel.name, kernel_source=prep.text,
                              spec=_spec_toml(prep.spec), params=params, size_names=", ".join(prep.spec.sizes[0]),
                              max_elements=self.max_elements)
        return self.roles.call("test_designer", msgs, lambda d: self.apply(prep, t, d),
                               describe=lambda d: f"{len(d['sizes'])} size sets, {len(d['inits'])} inits: {d['why']}")

    def apply(self, prep, template: KernelTemplate, data: dict) -> TuningSpec:
        spec = prep.spec
        names = list(spec.sizes[0])
        extra = []
        for i, pairs in enumerate(data["sizes"][: self.max_extra]):
            s = {p["name"]: p["value"] for p in pairs}
            if set(s) != set(names):
                raise ProposalError("sizes", f"sizes[{i}] names {sorted(s)}; every size set names {names}")
            s = {n: s[n] for n in names}
            for n, elems in spec_mod.buffer_elems(replace(spec, sizes=[s]), s).items():
                if elems > self.max_elements:
                    raise ProposalError("sizes", f"sizes[{i}] gives {n} {elems} elements (at most {self.max_elements})")
            if s not in spec.sizes and s not in extra:
                extra.append(s)
        args = copy.deepcopy(spec.args)
        by_name = {a.name: a for a in args}
        for j, it in enumerate(data["inits"]):
            a = by_name.get(it["arg"])
            if a is None or a.role not in ("in", "inout"):
                raise ProposalError("inits", f"inits[{j}]: '{it['arg']}' is not an input buffer of the kernel")
            a.init = it["init"]
        new = replace(spec, args=args, sizes=spec.sizes + extra)
        # the spec's own launch names the structural parameters; the template brings its launch and parameters
        names = (set(template.space.params) if template else set()) | (
            set(prep.structural.space.params) if prep.structural else set())
        spec_mod.validate_spec(new, prep.kernel, names,
                               prep.structural.space.original_config() if prep.structural else None)
        return new


class LlmAnalyst:
    """Diagnosis of a round in plain words, from its measured findings and failures."""

    def __init__(self, roles: LlmRoles):
        self.roles = roles

    def diagnose(self, rnd: Round, kernel: str) -> Analysis | None:
        keep = ("speedup", "original_us", "best_us", "pct_copy", "original_pct_copy", "best_params",
                "best_resources", "counts", "failures", "pruned", "per_param", "top")
        summary = {k: rnd.summary.get(k) for k in keep}
        summary["top"] = (summary["top"] or [])[:5]
        msgs = prompts.render("analyst", kernel=kernel, round=rnd.index + 1, origin=rnd.template.origin,
                              findings=rnd.analysis.text, summary=json.dumps(summary, indent=1, default=str))
        return self.roles.call("analyst", msgs, lambda d: Analysis(d["diagnosis"], dict(d)),
                               describe=lambda d: f"{d['bottleneck']}: {d['diagnosis'][:200]}")


class LlmPlanner:
    """A planning.Planner: the model picks the next step; the rule-based planner picks it when the model
    gives no usable answer, and the first round is always the rules' (the best-matching expert, else the
    user's own kernel)."""

    name = "llm"
    reads_profile = True  # the analysis text, ncu lines included, goes to the model

    def __init__(self, roles: LlmRoles, templater: LlmTemplater | None = None, analyst: LlmAnalyst | None = None,
                 fallback=None, budget_per_round: int = 40, max_rounds: int = 4):
        self.roles = roles
        self.templater = templater
        self.analyst = analyst
        self.fallback = fallback or RuleBasedPlanner(budget_per_round)
        self.budget = budget_per_round
        self.max_rounds = max_rounds

    def plan(self, rounds: list[Round], candidates: list[KernelTemplate]) -> Step:
        if rounds:
            self.roles.log.at(rounds[-1].summary.get("session_id"))
        if not rounds or self.roles.offline:
            return self._fallback(rounds, candidates)
        last = rounds[-1]
        kernel = last.summary.get("kernel") or last.template.kernel
        diag = self.analyst.diagnose(last, kernel) if self.analyst else None
        cands = "\n".join(f"{i}: {c.origin} template, parameters " +
                          ", ".join(f"{n}={p.values}" for n, p in c.space.params.items())
                          for i, c in enumerate(candidates)) or "none"
        msgs = prompts.render("planner", kernel=kernel, history="\n".join(_round_line(r) for r in rounds),
                              diagnosis=(diag.text if diag else last.analysis.text), candidates=cands,
                              rounds_left=max(0, self.max_rounds - len(rounds)))
        step = self.roles.call("planner", msgs, lambda d: self._step(d, rounds, candidates),
                               describe=lambda d: f"{d['action']}: {d['reason']}")
        if step is None:
            return self._fallback(rounds, candidates)
        if step.action == "retemplatize":
            t = self.templater.propose(self.templater.prep, rounds, step.reason) \
                if self.templater is not None and self.templater.prep is not None else None
            if t is None:
                return self._fallback(rounds, candidates, "the proposed template could not be used")
            return Step("switch_template", f"new LLM template: {step.reason}", t, step.budget)
        return step

    def _fallback(self, rounds, candidates, why: str | None = None) -> Step:
        step = self.fallback.plan(rounds, candidates)
        why = why or (f"LLM offline ({self.roles.offline})" if self.roles.offline else None)
        if why and rounds:
            step = replace(step, reason=f"{step.reason} [rules: {why}]")
        return step

    def _step(self, d: dict, rounds: list[Round], candidates: list[KernelTemplate]) -> Step:
        action, reason = d["action"], d["reason"] or d["action"]
        budget = d["budget"] if d["budget"] > 0 else self.budget
        if action == "stop":
            return Step("stop", reason)
        if action in ("search", "switch_template"):
            i = d["candidate"]
            if not 0 <= i < len(candidates):
                raise ProposalError("candidate", f"candidate {i} does not exist (there are {len(candidates)}, "
                                                 "numbered from 0)")
            return Step(action, reason, candidates[i], budget)
        if action == "retemplatize":
            if not d["idea"].strip():
                raise ProposalError("idea", "retemplatize needs an idea: what the new template should change")
            if self.templater is None:
                raise ProposalError("action", "retemplatize is not available in this session; choose another action")
            return Step("retemplatize", d["idea"].strip(), None, budget)
        return self._resize(action, reason, d["changes"], rounds[-1], budget)

    def _resize(self, action: str, reason: str, changes: list[dict], last: Round, budget: int) -> Step:
        t = copy.deepcopy(last.template)
        best = last.summary.get("best_params") or {}
        if not changes:
            raise ProposalError("changes", f"{action} needs changes: new values for at least one parameter")
        for ch in changes:
            p = t.space.params.get(ch["param"])
            if p is None:
                raise ProposalError("changes", f"'{ch['param']}' is not a parameter of the last template "
                                               f"({', '.join(t.space.params)})")
            new, old = sorted(set(ch["values"])), set(p.values)
            if action == "widen" and not (set(new) > old):
                raise ProposalError("changes", f"widen {p.name}: {new} must contain every old value {sorted(old)} "
                                               "and add some")
            if action == "narrow":
                keep = {p.original} | ({best[p.name]} if p.name in best else set())
                if not (set(new) < old) or not keep <= set(new):
                    raise ProposalError("changes", f"narrow {p.name}: {new} must be a strict subset of "
                                                   f"{sorted(old)} that keeps {sorted(keep)}")
            if any(v < 0 or v > 1 << 20 for v in new):
                raise ProposalError("changes", f"{p.name}: values must be between 0 and {1 << 20}")
            p.values = new
        if t.space.size() > 1_000_000 or not valid_configs(t.space, last.summary.get("sizes"), limit=1):
            raise ProposalError("changes", "the changed space has no valid configuration or is too large")
        return Step(action, reason, t, budget)
