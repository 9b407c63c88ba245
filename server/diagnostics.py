"""Diagnostics: hard-coded tunables (hint: shown in the editor, not listed in the Problems panel; none once the
kernel's result is applied), spec problems (missing: information with a quick fix;
invalid: warning at the field), kernels kerntune cannot tune, and the tuning result / live best (hint)."""

from __future__ import annotations

import json
import re
from typing import Any

from lsprotocol import types as lsp

from .analysis import KernelFacts, all_facts, facts_and_shift, kernel_facts
from .documents import Doc, Documents
from .results import Results

SOURCE = "kerntune"
INFO, WARN, HINT = lsp.DiagnosticSeverity.Information, lsp.DiagnosticSeverity.Warning, lsp.DiagnosticSeverity.Hint


def _fmt_params(p: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (p or {}).items())


def _domain(values: list[int]) -> str:
    if len(values) <= 8:
        return ", ".join(map(str, values))
    return f"{values[0]}, {values[1]}, …, {values[-1]} ({len(values)} values)"


def kernel_diagnostics(doc: Doc, k, facts: KernelFacts, results: Results, encoding: str,
                       cache: dict | None = None) -> list[lsp.Diagnostic]:
    """The kernel's diagnostics. ``cache`` (per document): the part that depends only on the kernel's facts
    and position is reused while those are the same objects (an edit elsewhere in the file)."""
    static = _static_cached(doc, k, facts, encoding, cache, _applied(doc, k, results))[0]
    if facts.syntax_errors:
        return static
    return static + _result_diagnostics(doc, k, results, encoding)


def _applied(doc: Doc, k, results: Results) -> bool:
    """The kernel's stored result is applied: the file is its tuned state, its values are no longer hard-coded
    guesses."""
    s = results.summary(doc, k.name)
    return bool(s and s.get("applied"))


def _static_cached(doc: Doc, k, facts: KernelFacts, encoding: str, cache: dict | None, applied: bool = False) -> list:
    """[diagnostics, their JSON (filled in by ``diagnostics_json``)] of the facts-only part, cached."""
    ns = k.name_span
    key = (ns.line, ns.col, ns.end_line, ns.end_col, encoding, applied)
    hit = cache.get(k.name) if cache is not None else None
    if hit is not None and hit[0] is facts and hit[1] == key:
        return hit[2]
    entry = [_static_diagnostics(doc, k, facts, encoding, applied), None]
    if cache is not None:
        cache[k.name] = (facts, key, entry)
    return entry


def _static_diagnostics(doc: Doc, k, facts: KernelFacts, encoding: str, applied: bool = False) -> list[lsp.Diagnostic]:
    idx = doc.index
    name_rng = idx.range(k.name_span, encoding)
    out: list[lsp.Diagnostic] = []

    def diag(rng, msg, sev, code, data=None):
        out.append(lsp.Diagnostic(range=rng, message=msg, severity=sev, source=SOURCE, code=code, data=data))

    for e in facts.syntax_errors[:3]:
        diag(idx.range(e.span, encoding), f"kernel '{k.name}' has a syntax error here ({e.message}): "
             "kerntune cannot templatize or tune it until it is fixed", INFO, "syntax-error")
    if facts.syntax_errors:
        return out
    if facts.template_error is not None:
        diag(name_rng, f"nothing tunable found in '{k.name}': {facts.template_error.message}", HINT, "not-tunable")
    for s in [] if applied else facts.sites:
        p = facts.params.get(s.param)
        if p is None:
            continue
        what = p.why or p.kind.replace("_", " ")
        diag(idx.range(s.span, encoding),
             f"hard-coded {p.kind.replace('_', ' ')} {s.original_text}: tunable as {p.name} "
             f"(domain {_domain(p.values)}); {what}. 'Optimize kernel' searches it on the GPU.",
             HINT, "tunable", {"kernel": k.name, "param": p.name})
    if facts.spec_status == "missing":
        diag(name_rng, f"kernel '{k.name}' has no tuning spec: kerntune needs one to run it on its own. "
             "Quick fix: 'Create tuning spec' drafts it above the kernel.", INFO, "missing-spec",
             {"kernel": k.name})
    elif facts.spec_status == "invalid" and facts.spec_error is not None:
        e = facts.spec_error
        if e.path in (None, "", doc.path) and e.line is not None:
            line = min(e.line, idx.line_count - 1)
            rng = lsp.Range(start=lsp.Position(line=line, character=0),
                            end=lsp.Position(line=line, character=idx.character(line, len(idx.line_bytes(line)),
                                                                                 encoding)))
            msg = e.message
        else:
            rng, msg = name_rng, str(e)
        field = f" [{e.field_name}]" if e.field_name else ""
        diag(rng, f"tuning spec of '{k.name}'{field}: {msg}", WARN, "invalid-spec",
             {"kernel": k.name, "field": e.field_name})
    return out


def _result_diagnostics(doc: Doc, k, results: Results, encoding: str) -> list[lsp.Diagnostic]:
    out: list[lsp.Diagnostic] = []

    def diag(_, msg, sev, code, data=None):
        out.append(lsp.Diagnostic(range=doc.index.range(k.name_span, encoding), message=msg, severity=sev,
                                  source=SOURCE, code=code, data=data))

    live = results.live.get((doc.path, k.name))
    if live is not None and not live.finished:
        best = (f", best so far {live.speedup:.2f}x with {_fmt_params(live.best.params)}"
                if live.best and live.speedup else "")
        diag(None, f"kerntune: tuning {live.done}/{live.total} ({live.ok} ok, {live.failed} failed, "
             f"{live.pruned} pruned){best}", HINT, "tuning")
    else:
        s = results.summary(doc, k.name)
        if s and s.get("speedup"):
            stale = (" (stale: the file changed since; optimize again)" if s.get("stale")
                     else " (applied)" if s.get("applied") else "")
            d = s.get("dispatch") or {}
            per = (f"; {d['speedup']:.2f}x with a per-shape dispatch of {len(d.get('entries') or [])} configurations"
                   if d.get("speedup") else "")
            diag(None, f"kerntune: {s['speedup']:.2f}x faster with {_fmt_params(s.get('best_params'))} "
                 f"on {s.get('device')}{per}{stale}", HINT, "result")
    return out


def diagnostics(docs: Documents, doc: Doc, results: Results, encoding: str) -> list[lsp.Diagnostic]:
    out: list[lsp.Diagnostic] = []
    cache = docs.diag_cache.setdefault(doc.uri, {})
    for k, facts in all_facts(docs, doc):
        out.extend(kernel_diagnostics(doc, k, facts, results, encoding, cache))
    return out


_JSON_LINE = re.compile(r'"line": (\d+)|\bline (\d+)')


def diagnostics_json(docs: Documents, doc: Doc, results: Results, encoding: str, converter: Any) -> tuple[str, int]:
    """The same diagnostics as ``diagnostics``, as the JSON text of the array and how many. Each kernel's
    facts-only diagnostics are serialized once, as a template whose line numbers (the ranges' and the
    messages' "at line N") are filled in for where the kernel stands now: an edit above a hundred kernels
    moves them all, and re-serializing hundreds of diagnostics on every keystroke costs more than the rest."""
    templates = docs.diag_templates.setdefault(doc.uri, {})
    memo = docs.diag_json_memo.setdefault(doc.uri, {})
    if len(memo) > 4096:
        memo.clear()
    parts: list[str] = []
    n = 0

    def dumps(d: lsp.Diagnostic) -> str:
        return json.dumps(converter.unstructure(d))

    if doc.cf is None:
        return "[]", 0
    for k in doc.cf.kernels:
        facts, dl = facts_and_shift(docs, doc, k)
        ns = k.name_span
        applied = _applied(doc, k, results)
        key = (encoding, ns.col, ns.end_col, ns.end_line - ns.line, applied)
        hit = templates.get(k.name)
        if hit is not None and hit[0] is facts and hit[1] == key:
            texts, nums, count = hit[2]
        else:
            static = _static_diagnostics(doc, k, kernel_facts(docs, doc, k), encoding, applied)
            text = ", ".join(dumps(d) for d in static)
            texts, nums, pos = [], [], 0
            for m in _JSON_LINE.finditer(text):
                g = 1 if m.group(1) is not None else 2
                texts.append(text[pos:m.start(g)])
                nums.append(int(m.group(g)) - dl)  # where it was when the facts were made
                pos = m.end(g)
            texts.append(text[pos:])
            count = len(static)
            templates[k.name] = (facts, key, (texts, nums, count))
        if count:
            if nums:
                out = [texts[0]]
                for t, v in zip(texts[1:], nums):
                    out.append(str(v + dl))
                    out.append(t)
                parts.append("".join(out))
            else:
                parts.append(texts[0])
            n += count
        if facts.syntax_errors:
            continue
        for d in _result_diagnostics(doc, k, results, encoding):
            r = d.range
            key2 = (r.start.line, r.start.character, r.end.line, r.end.character, d.code, d.message)
            text = memo.get(key2)
            if text is None:
                text = memo[key2] = dumps(d)
            parts.append(text)
            n += 1
    return "[" + ", ".join(parts) + "]", n
