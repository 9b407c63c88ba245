"""Expert templates: a library of parameterized kernels of the LLM-serving families, bound to a user's kernel.

``candidates`` reads what the kernel computes (``evidence``: argument roles, reads and writes, sizes, math
calls, index shapes) and lets each family's binder (``families/``) enumerate every plausible binding of its
expert: which argument plays which role, which size names give the role sizes, the layout and the numeric
conventions. ``bind`` renders one binding (``render``: the expert's code with its conventions resolved and a
``__global__`` wrapper with the user's exact signature) into a ``KernelTemplate`` the tuner verifies like any
other. The optimize loop checks one cheap configuration of each binding before it tunes one
(``agent_core.agent.screen``): a wrong binding costs a failed check, never a wrong rewrite.
"""

from __future__ import annotations

import itertools
import re

from agent_core import expr
from agent_core.model import CudaFile, KernelTemplate, KerntuneError, Param, ParamSpace, TuningSpec
from agent_core.templating.experts.binding import (MAX_PER_FAMILY, Binding, Match, cluster_twin, cluster_twin_name,
                                                   long_twin, long_twin_name, ranked)
from agent_core.templating.experts.evidence import CTYPE, NBYTES, Evidence, branch_flags, gather
from agent_core.templating.experts.families import BINDERS
from agent_core.templating.experts.library import COMMON, EXPERT_DIR, Expert, load_expert, load_library
from agent_core.templating.experts.render import render, subst

__all__ = ["Binding", "Match", "Expert", "EXPERT_DIR", "COMMON", "CTYPE", "NBYTES", "MAX_PER_FAMILY", "candidates",
           "match", "bind", "load_library", "load_expert", "cluster_twin", "cluster_twin_name", "long_twin", "long_twin_name", "NoConfiguration", "evidence_of", "family_groups"]


def evidence_of(cf: CudaFile, kernel_name: str, spec: TuningSpec) -> Evidence | None:
    """The kernel's evidence, or None when the spec does not describe every parameter."""
    k = cf.kernel(kernel_name)
    if len(spec.args) != len(k.params):
        return None
    return gather(cf, k, spec)


def candidates(cf: CudaFile, kernel_name: str, spec: TuningSpec, library: list[Expert] | None = None,
               cap: int = MAX_PER_FAMILY) -> list[Binding]:
    """Every plausible binding of every family the kernel's computation fits, each family's best supported
    first (at most ``cap`` per family), the surer families first; no cluster twins (``cluster_twin`` gives
    the twin of a binding that verified). A binding's reading of its own (``Binding.reading``: what the body shows
    against the spec's roles) is capped apart and comes before the expert's other bindings."""
    ev = evidence_of(cf, kernel_name, spec)
    if ev is None:
        return []
    lib = {e.name: e for e in (library if library is not None else load_library())}
    out: list[Binding] = []
    flags = branch_flags(ev)
    for binder in BINDERS:
        found = binder.enumerate_bindings(ev, lib)
        for b in found:  # a flag the body branches on that the binding does not pass on: held at its spec value
            b.pinned = {f.name: int(f.counts[0]) for f in flags if not _passes(b, f.name)}
            b.words += [f"`{n}` held at {v} (the spec's value; the wrapper traps on another)" for n, v in
                        b.pinned.items()]
        readings = lambda b: (b.expert.name, not b.reading, b.reading)  # noqa: E731
        for _, group in itertools.groupby(sorted(found, key=readings), key=readings):
            out += ranked(list(group), cap)
    return sorted(out, key=lambda b: -b.score)  # stable: each expert's bindings keep their order


def _passes(b: Binding, name: str) -> bool:
    """Whether the binding hands the argument ``name`` to its expert (a call argument, a define's value)."""
    pat = re.compile(rf"\b{re.escape(name)}\b")
    return any(pat.search(x) for x in b.call_args) or any(pat.search(str(v)) for v in b.defines.values())


def family_groups(bindings: list[Binding]) -> dict[str, list[Binding]]:
    """The bindings by expert name, in order."""
    groups: dict[str, list[Binding]] = {}
    for b in bindings:
        groups.setdefault(b.expert.name, []).append(b)
    return groups


def match(cf: CudaFile, kernel_name: str, spec: TuningSpec, library: list[Expert] | None = None) -> list[Binding]:
    """The likeliest binding of each expert the kernel fits, with the row families' cluster twins after them,
    best first: what the loop tries when no binding can be checked first."""
    lib = {e.name: e for e in (library if library is not None else load_library())}
    firsts = [g[0] for g in family_groups(candidates(cf, kernel_name, spec, list(lib.values()))).values()]
    twins = [t for t in (cluster_twin(b, lib) for b in firsts) if t is not None]
    return sorted(firsts + twins, key=lambda b: -b.score)


def _valid_configs(params: dict[str, Param], constraints: list[str], sizes: list[dict]) -> list[dict[str, int]]:
    names = list(params)
    ok = []
    for combo in itertools.product(*(params[n].values for n in names)):
        cfg = dict(zip(names, combo))
        if all(expr.evaluate(c, {**s, **cfg}) for s in sizes for c in constraints):
            ok.append(cfg)
    return ok


class NoConfiguration(KerntuneError):
    """The expert has no configuration that satisfies its constraints on every size set of the spec (a row
    longer than its registers hold): its long-row twin (``long_twin``) may."""


def bind(m: Binding, cf: CudaFile, spec: TuningSpec) -> KernelTemplate:
    """The expert bound to the user's kernel: a template whose entry has the kernel's exact parameter list."""
    e = m.expert
    k = cf.kernel(m.kernel)
    subs = {n: f"({v})" for n, v in m.sizes.items()}
    subs.update({n: str(v) for n, v in m.consts.items()})
    constraints = [subst(c, subs) for c in e.constraints]
    params = {n: Param(p.name, [v for v in p.values if v in m.fixed.get(n, p.values)], p.original, p.kind, p.why,
                       closed=p.closed) for n, p in e.params.items()}
    try:
        valid = _valid_configs(params, constraints, spec.sizes)
    except KerntuneError as err:
        raise KerntuneError(f"expert {e.name}: {err.message}", cf.path, k.span.line) from None
    if not valid:
        raise NoConfiguration(f"expert {e.name}: no configuration satisfies its constraints on every size set "
                            f"({'; '.join(constraints)})", cf.path, k.span.line)
    default = {n: p.original for n, p in params.items()}
    start = default if default in valid else valid[0]
    for n, p in params.items():
        p.values = sorted({cfg[n] for cfg in valid})
        p.original = start[n]
    conv = {**e.conventions, **m.conventions}
    missing = sorted({n for c, names in e.launch.get("sizes_when", {}).items() if conv.get(c) for n in names}
                     - set(m.sizes))
    if missing:
        raise KerntuneError(f"expert {e.name}: the binding gives no size {', '.join(missing)} (its conventions' "
                            "grid needs them)", cf.path, k.span.line)
    grid = next((g for c, g in e.launch.get("grid_when", {}).items() if conv.get(c)), e.launch["grid"])
    block = next((bl for c, bl in e.launch.get("block_when", {}).items() if conv.get(c)), e.launch["block"])
    smem = next((x for c, x in e.launch.get("smem_when", {}).items() if conv.get(c)), e.launch["smem"])
    launch = {"grid": [subst(g, subs) for g in grid],
              "block": [subst(b, subs) for b in block],
              "smem": subst(smem, subs)}
    entry = f"kt_{e.name}_{k.name}"
    text = render(m, k, cf, entry, {a.name: a.dtype for a in spec.args})
    space = ParamSpace(k.name, params, constraints)
    return KernelTemplate(kernel=k.name, path=cf.path, original_text=cf.text, text=text, space=space, sites=[],
                          origin=f"expert:{e.name}", launch=launch, entry=entry,
                          serves=subst(e.serves, subs) if e.serves else None)
