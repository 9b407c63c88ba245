"""Per-kernel facts the editor shows: tunable sites (templatize), spec status (find/validate), template files.

Computed by the engine and cached by the text they depend on (``documents.kernel_key``), so an edit
re-analyses only the kernels it touched. Cached spans are relocated to where their anchor (the kernel, a
launch site, a host variable, a ``#define``) stands in the current version.
"""

from __future__ import annotations

import logging
import os
import re
from bisect import bisect_right
from dataclasses import dataclass, field, replace

from agent_core.source import spec as spec_mod
from agent_core.source.cuda_parse import kernel_has_errors
from agent_core.model import Kernel, KerntuneError, Param, ParseIssue, Site, Span
from agent_core.templating.space import space_from_toml, template_file_names
from agent_core.templating.templatize import templatize
from agent_core.workspace import workdir_for

from .documents import Doc, Documents, kernel_key, lead_start

log = logging.getLogger(__name__)


@dataclass
class KernelFacts:
    name: str
    sites: list[Site] = field(default_factory=list)
    params: dict[str, Param] = field(default_factory=dict)
    constraints: list[str] = field(default_factory=list)
    template_error: KerntuneError | None = None  # why the kernel has no structural template
    spec_status: str = "ok"  # "ok" | "missing" | "invalid"
    spec_error: KerntuneError | None = None
    spec_origin: str = ""
    workspace_params: list[str] = field(default_factory=list)  # params of the user's .kerntune/ space file
    syntax_errors: list[ParseIssue] = field(default_factory=list)


def _anchors(doc: Doc, k: Kernel) -> list[Span]:
    """The places kernel ``k``'s facts are about: the kernel, the text above it back to the previous kernel
    (its spec comment), its launch sites and their host variables, the file's #defines."""
    lead = lead_start(doc, k)
    idx = doc.index
    line = bisect_right(idx.starts, lead) - 1
    out = [k.span, Span(lead, k.span.start, line, lead - idx.starts[line], k.span.line, k.span.col)]
    for s in k.launch_sites:
        out.append(s.span)
        out.extend(v.span for v in s.host_vars.values())
    out.extend(s.span for s in k.macro_launch_sites)  # a launch inside a macro: anchored at the macro's use
    if doc.cf is not None:
        out.extend(d.span for d in doc.cf.defines)
    return out


_LINE_REF = re.compile(r"\bline (\d+)")


def _moved_facts(facts: KernelFacts, old: list[Span], new: list[Span], path: str) -> KernelFacts:
    """``facts`` of a kernel whose text is unchanged but stands elsewhere: site spans, the spec error's line
    and the "at line N" of the engine's explanations follow the anchor (kernel, launch site, host variable,
    #define) they are in."""
    def new_line(line: int) -> int:  # 0-based
        for a, b in zip(old, new):
            if a.line <= line <= a.end_line:
                return line + b.line - a.line
        return line

    def relined(text: str) -> str:
        return _LINE_REF.sub(lambda m: f"line {new_line(int(m.group(1)) - 1) + 1}", text)

    def moved_error(e: KerntuneError | None) -> KerntuneError | None:
        if e is None:
            return None
        line = new_line(e.line) if e.line is not None and e.path in (None, "", path) else e.line
        return KerntuneError(relined(e.message), e.path, line, e.col, e.field_name)

    return replace(facts, sites=[replace(s, span=_relocate(s.span, old, new)) for s in facts.sites],
                   params={n: replace(p, why=relined(p.why)) for n, p in facts.params.items()},
                   template_error=moved_error(facts.template_error), spec_error=moved_error(facts.spec_error))


def _lines_cols(spans: list[Span]) -> list[tuple[int, int, int, int]]:
    return [(a.line, a.col, a.end_line, a.end_col) for a in spans]


def _relocate(span: Span, old: list[Span], new: list[Span]) -> Span:
    for a, b in zip(old, new):
        if a.start <= span.start and span.end <= a.end:
            if a == b:
                return span
            dl = b.line - a.line
            dcol = b.col - a.col
            return Span(span.start + b.start - a.start, span.end + b.start - a.start, span.line + dl,
                        span.col + (dcol if span.line == a.line else 0), span.end_line + dl,
                        span.end_col + (dcol if span.end_line == a.line else 0))
    return span


_WORKDIRS: dict[str, object] = {}


def _workdir(path: str):
    wd = _WORKDIRS.get(path)
    if wd is None:
        wd = _WORKDIRS[path] = workdir_for(path)
    return wd


_SPACES: dict[str, tuple[tuple, list[str]]] = {}  # space file -> (stamp, its parameters)


def _workspace_params(doc: Doc, kernel: str) -> tuple[list[str], tuple]:
    """The parameters of the kernel's space file in .kerntune/ (the user may have edited it), and its stamp."""
    names = doc.memo("workdir", lambda: _listdir(_workdir(doc.path)))  # once per version, not per kernel
    _, sname = template_file_names(doc.path, kernel)
    if sname not in names:
        return [], ()
    spath = _workdir(doc.path) / sname
    try:
        st = os.stat(spath)
    except OSError:
        return [], ()
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _SPACES.get(str(spath))
    if hit is not None and hit[0] == stamp:
        return hit[1], stamp
    try:
        space, _ = space_from_toml(spath.read_text(encoding="utf-8"), str(spath), None)
        params = list(space.params)
    except Exception:  # reported when the template is used
        params = []
    _SPACES[str(spath)] = (stamp, params)
    return params, stamp


def _listdir(path) -> frozenset[str]:
    try:
        return frozenset(os.listdir(path))
    except OSError:
        return frozenset()


def _mtime(p) -> int | None:
    try:
        return os.stat(p).st_mtime_ns
    except OSError:
        return None


def _compute(doc: Doc, k: Kernel, ws_params: list[str]) -> KernelFacts:
    cf = doc.cf
    facts = KernelFacts(name=k.name, workspace_params=ws_params)
    try:
        t = templatize(cf, k.name)
        facts.sites, facts.params, facts.constraints = list(t.sites), dict(t.space.params), list(t.space.constraints)
    except KerntuneError as e:
        facts.template_error = e
    except Exception as e:  # an engine bug must not take the editor down
        log.exception("templatize %s failed", k.name)
        facts.template_error = KerntuneError(f"templatize failed: {e}", doc.path, k.name_span.line)
    try:
        s = spec_mod.find_spec(cf, k.name)
        if s is None:
            facts.spec_status = "missing"
        else:
            facts.spec_origin = s.origin
            spec_mod.validate_spec(s, k, set(facts.params) | set(ws_params),
                                   {n: p.original for n, p in facts.params.items()})
    except KerntuneError as e:
        facts.spec_status, facts.spec_error = "invalid", e
    except Exception as e:
        log.exception("spec check of %s failed", k.name)
        facts.spec_status, facts.spec_error = "invalid", KerntuneError(f"spec check failed: {e}", doc.path)
    return facts


def facts_and_shift(docs: Documents, doc: Doc, k: Kernel) -> tuple[KernelFacts, int]:
    """(facts, dl): kernel ``k``'s facts as they were computed or last moved, and how many lines everything
    they place has moved since. An edit above a kernel moves it and all it refers to by the same number of
    lines; the facts are then kept as they are (dl != 0) and the diagnostics' JSON is shifted (see
    diagnostics.diagnostics_json) instead of moving and re-serializing every kernel below the edit."""
    def compute() -> tuple[KernelFacts, int]:
        errors = kernel_has_errors(doc.cf, k)
        if errors:
            return KernelFacts(name=k.name, syntax_errors=list(errors)), 0
        ws_params, stamp = _workspace_params(doc, k.name)
        side_stamp = doc.memo("sidecar", lambda: _mtime(spec_mod.sidecar_path(doc.path)))
        key = (kernel_key(doc, k), stamp, side_stamp)
        anchors = _anchors(doc, k)
        hit = docs.kernel_cache.get((doc.uri, k.name))
        if hit is not None and hit[0] == key and len(hit[1]) == len(anchors):
            old_anchors, facts, used = hit[1], hit[2], hit[3]
            if _lines_cols(old_anchors) == _lines_cols(anchors):
                # only byte offsets moved (an edit earlier on the same line... or none): the editor's features
                # use lines and columns, so the facts stand as they are; their spans stay consistent with the
                # anchors kept beside them
                return facts, 0
            dl = _uniform_shift(old_anchors, anchors, used)
            if dl is not None:
                return facts, dl
            facts = _moved_facts(facts, old_anchors, anchors, doc.path)
        else:
            facts = _compute(doc, k, ws_params)
        docs.kernel_cache[(doc.uri, k.name)] = (key, anchors, facts, _used_anchors(facts, anchors, doc.path))
        return facts, 0

    return doc.memo(("facts+shift", k.name), compute)


def kernel_facts(docs: Documents, doc: Doc, k: Kernel) -> KernelFacts:
    """Facts for kernel ``k`` of ``doc``'s current version, positions up to date (cached)."""
    facts, dl = facts_and_shift(docs, doc, k)
    if dl == 0:
        return facts
    return doc.memo(("facts", k.name), lambda: _shifted_facts(facts, dl, doc.path))


def _used_anchors(facts: KernelFacts, anchors: list[Span], path: str) -> frozenset[int] | None:
    """The anchors that the facts place something in (a site) or refer to ("at line N", the spec error's
    line); None when they refer to a line outside every anchor (those facts are always moved, not shifted)."""
    used = {0, 1}  # the kernel (its name) and the text above it (the spec comment)

    def anchor_of_line(line: int) -> int | None:
        return next((i for i, a in enumerate(anchors) if a.line <= line <= a.end_line), None)

    for st in facts.sites:
        i = next((i for i, a in enumerate(anchors) if a.start <= st.span.start and st.span.end <= a.end), None)
        if i is None:
            i = anchor_of_line(st.span.line)
        if i is None:
            return None
        used.add(i)
    texts = [p.why for p in facts.params.values()]
    lines: list[int] = []
    for e in (facts.template_error, facts.spec_error):
        if e is not None:
            texts.append(e.message)
            if e.line is not None and e.path in (None, "", path):
                lines.append(e.line)
    lines += [int(m.group(1)) - 1 for t in texts for m in _LINE_REF.finditer(t)]
    for line in lines:
        i = anchor_of_line(line)
        if i is None:
            return None
        used.add(i)
    return frozenset(used)


def _uniform_shift(old: list[Span], new: list[Span], used: frozenset[int] | None) -> int | None:
    """How many lines every used anchor moved, when they all moved by the same number and kept their columns."""
    if used is None:
        return None
    dl = None
    for i in used:
        a, b = old[i], new[i]
        if a.col != b.col or a.end_col != b.end_col or b.end_line - b.line != a.end_line - a.line:
            return None
        if dl is None:
            dl = b.line - a.line
        elif dl != b.line - a.line:
            return None
    return dl


def _shifted_facts(facts: KernelFacts, dl: int, path: str) -> KernelFacts:
    """``facts`` moved down ``dl`` lines (all of it: see ``_uniform_shift``)."""
    def sp(s: Span) -> Span:
        return Span(s.start, s.end, s.line + dl, s.col, s.end_line + dl, s.end_col)

    def relined(text: str) -> str:
        return _LINE_REF.sub(lambda m: f"line {int(m.group(1)) + dl}", text)

    def moved_error(e: KerntuneError | None) -> KerntuneError | None:
        if e is None:
            return None
        same_file = e.line is not None and e.path in (None, "", path)
        return KerntuneError(relined(e.message), e.path, e.line + dl if same_file else e.line, e.col, e.field_name)

    return replace(facts, sites=[replace(st, span=sp(st.span)) for st in facts.sites],
                   params={n: replace(p, why=relined(p.why)) for n, p in facts.params.items()},
                   template_error=moved_error(facts.template_error), spec_error=moved_error(facts.spec_error))


def all_facts(docs: Documents, doc: Doc) -> list[tuple[Kernel, KernelFacts]]:
    if doc.cf is None:
        return []
    return [(k, kernel_facts(docs, doc, k)) for k in doc.cf.kernels]
