"""Hovers: on a kernel's name, what tuning won (Markdown tables); on a tunable, its domain and the time per
tried value."""

from __future__ import annotations

from lsprotocol import types as lsp

from .analysis import KernelFacts, kernel_facts
from .documents import Doc, Documents
from .positions import span_contains
from .results import Results


_MD_SPECIAL = set("\\`*_{}[]()<>#+-.!|~")


def md_text(s) -> str:
    """A string read from a results store (a device name, a template's origin) as plain Markdown text: every
    character Markdown or HTML would interpret escaped, line breaks flattened, at most 200 characters. A store
    from elsewhere cannot put links, images or markup into a hover."""
    s = " ".join(str(s).split())[:200]
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in s)


def _p(params: dict | None) -> str:
    return "`" + ", ".join(f"{k}={v}" for k, v in (params or {}).items()) + "`" if params else "—"


def _us(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def _sizes(sz: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sz.items())


def kernel_markdown(doc: Doc, k, facts: KernelFacts, results: Results) -> str:
    lines = [f"### kerntune: `{k.name}`"]
    live = results.live.get((doc.path, k.name))
    if live is not None and not live.finished:
        best = f"; best so far **{live.speedup:.2f}x** with {_p(live.best.params)}" if live.speedup else ""
        lines.append(f"Tuning: {live.done}/{live.total} evaluated ({live.ok} ok, {live.failed} failed, "
                     f"{live.pruned} pruned){best}. {live.message}")
    s = results.summary(doc, k.name)
    if s is None:
        if facts.syntax_errors:
            lines.append("Not tunable until the syntax error inside the kernel is fixed.")
        lines.append(f"Tunables: {', '.join(f'`{n}`' for n in facts.params) or 'none found'}. "
                     f"Spec: {facts.spec_status}.")
        if live is None:
            lines.append("No tuning result yet: use **Optimize kernel** above the kernel.")
        return "\n\n".join(lines)
    if s.get("applied"):
        lines.append("✅ **Applied**: the file holds this result (written by Apply best).")
    if s.get("stale"):
        lines.append("⚠️ **Stale**: the file changed since this result was measured. Optimize again to refresh it.")
    bw = s.get("copy_bw_gbps")
    head = f"Device **{md_text(s.get('device'))}**" + (f" (copy bandwidth {bw:.0f} GB/s)" if bw else "")
    head += f" · session {s.get('session_id')}, {s.get('status')}"
    head += ", confirmed interleaved" if s.get("confirmed") else ""
    others = [d for d in s.get("devices") or [] if d != s.get("device")]
    if others:  # a configuration is tuned for one device model
        head += f" · also tuned on {', '.join(md_text(o) for o in others)} (`kerntune apply --device NAME`)"
    lines.append(head)
    marks = _kept_marks(s)
    rows = ["| size set | original µs | best µs | speedup | GB/s | % copy bw |" + (" applied |" if marks else ""),
            "|---|--:|--:|--:|--:|--:|" + ("---|" if marks else "")]
    orig, best = s.get("original_us") or [], s.get("best_us") or []
    gbps, pct = s.get("gbps") or [], s.get("pct_copy") or []
    for i, sz in enumerate(s.get("sizes") or []):
        o = orig[i] if i < len(orig) else None
        b = best[i] if i < len(best) else None
        sp = f"{o / b:.2f}x" if o and b else "—"
        g = f"{gbps[i]:.0f}" if i < len(gbps) and gbps[i] is not None else "—"
        pc = f"{pct[i]:.0f}%" if i < len(pct) and pct[i] is not None else "—"
        rows.append(f"| {_sizes(sz)} | {_us(o)} | {_us(b)} | {sp} | {g} | {pc} |"
                    + (f" {marks.get(i, '')} |" if marks else ""))
    lines.append("\n".join(rows))
    sp = s.get("speedup")
    lines.append(f"Speedup **{sp:.2f}x** (geometric mean) with {_p(s.get('best_params'))}; original "
                 f"{_p(s.get('original_params'))}" if sp else "No variant verified faster than the original.")
    if s.get("dispatch"):
        lines.append(dispatch_markdown(s["dispatch"], k.name, doc))
    c = s.get("counts") or {}
    lines.append(f"Evaluations: {c.get('ok', 0)} ok · {c.get('failed', 0)} failed · {c.get('pruned', 0)} pruned"
                 + (f" · {c['reused']} reused from the store" if c.get("reused") else ""))
    if s.get("llm_run"):
        lines.append(f"Model: {s['llm_run']['text']} (`kerntune results` lists every call)")
    top = s.get("top") or []
    if top:
        t = ["| # | configuration | time vs original |", "|--:|---|--:|"]
        for i, e in enumerate(top[:5], 1):
            obj = e.get("objective")
            t.append(f"| {i} | {_p(e.get('params'))} | {obj:.3f}× |" if obj else f"| {i} | {_p(e.get('params'))} | — |")
        lines.append("Top configurations:\n\n" + "\n".join(t))
    fails = s.get("failures") or []
    if fails:
        fl = []
        for f in fails[:5]:
            err = (f.get("error") or "").strip().splitlines()
            fl.append(f"- {_p(f.get('params'))}: **{f.get('status')}**" + (f": {err[0][:160]}" if err else ""))
        lines.append("Why variants failed:\n\n" + "\n".join(fl))
    return "\n\n".join(lines)


def _kept_marks(s: dict) -> dict[int, str]:
    """Size set -> "**original kept**" where Apply best keeps the original kernel (the dispatch serves it with the
    original), or "**slower: not applied**" where one configuration would be slower than the original there."""
    from agent_core.agent.dispatch import Dispatch
    from agent_core.apply import single_slower
    from agent_core.model import KerntuneError
    if s.get("dispatch"):
        try:
            return {i: "**original kept**" for i in Dispatch.from_dict(s["dispatch"]).original_kept}
        except KerntuneError:
            return {}
    return {i: "**slower: not applied**" for i in single_slower(s)}


def dispatch_markdown(data: dict, kernel: str, doc: Doc) -> str:
    """The per-shape dispatch of a result: each size set's figures and which kernel serves it (named as Apply
    best would name it in the document), then the rules."""
    from agent_core.apply import dispatch_kernel_names
    from agent_core.agent.dispatch import Dispatch, condition_words
    from agent_core.model import KerntuneError
    try:
        d = Dispatch.from_dict(data)
    except KerntuneError as e:
        return f"Per-shape dispatch: unreadable record ({e.message})"
    names = dispatch_kernel_names(doc.text, doc.cf, kernel, d)
    how = "replayed" if d.backend == "replay" else "confirmed interleaved" if d.confirmed else "search figures"
    if d.applies_nothing:
        head = (f"**No regression** ({how}): the original kernel is kept on every size set, no verified "
                f"configuration is faster there beyond the measured noise ({d.single_speedup:.2f}x for one "
                "configuration); **Apply best** changes nothing.")
    else:
        head = (f"**Per-shape dispatch** ({how}): **{d.speedup:.2f}x** against {d.single_speedup:.2f}x for one "
                "configuration; **Apply best** writes it (one kernel per configuration, an `if`/`else` at each launch)."
                + (f" The original kernel is kept on {len(d.original_kept)} size set(s): no verified configuration "
                   "is faster there beyond the measured noise." if d.original_kept else ""))
    if d.instead:
        head += f" One configuration instead of the search's winner: {md_text(d.instead)}."
    rows = [head, "", "| size set | original µs | tuned µs | speedup | one configuration | kernel |",
            "|---|--:|--:|--:|--:|---|"]
    for i, sz in enumerate(d.sizes):
        kept = d.entries[d.serve[i]].is_original
        rows.append(f"| {_sizes(sz)} | {_us(d.original_us[i])} | {_us(d.tuned_us[i])} | "
                    f"{d.original_us[i] / d.tuned_us[i]:.2f}x | {d.single_original_us[i] / d.single_us[i]:.2f}x | "
                    + ("original kept" + ("" if d.applies_nothing else f" (`{names[d.serve[i]]}`)") if kept
                       else f"`{names[d.serve[i]]}`") + " |")
    rows.append("")
    for i, e in enumerate(d.entries):
        what = "the original kernel, unchanged" if e.is_original else f"{md_text(e.origin)} {_p(e.params)}"
        rows.append(f"- `{names[i]}`: {condition_words(d, i)} → {what}")
    return "\n".join(rows)


def param_markdown(doc: Doc, k, facts: KernelFacts, param: str, original_text: str, results: Results) -> str:
    p = facts.params[param]
    lines = [f"### `{p.name}` ({p.kind.replace('_', ' ')}) in `{k.name}`"]
    if p.why:
        lines.append(p.why)
    as_written = f" (`{original_text}`)" if original_text.strip() != str(p.original) else ""
    lines.append(f"Domain: {', '.join(map(str, p.values))} · original **{p.original}**{as_written}")
    s = results.summary(doc, k.name)
    live = results.live.get((doc.path, k.name))
    if live is not None and not live.finished and live.best is not None and param in live.best.params:
        lines.append(f"Tuning: best so far **{live.best.params[param]}**")
    if s:
        bp = (s.get("best_params") or {}).get(param)
        stale = " (stale)" if s.get("stale") else ""
        if bp is not None:
            lines.append(f"Best found: **{bp}**{stale}")
        per = (s.get("per_param") or {}).get(param) or {}
        if per:
            rows = ["| value | best time vs original | speedup |", "|--:|--:|--:|"]
            for v, r in sorted(per.items(), key=lambda kv: int(kv[0])):
                mark = " (original)" if int(v) == p.original else ""
                rows.append(f"| {v}{mark} | {r:.3f}× | {1 / r:.2f}x |" if r else f"| {v}{mark} | — | — |")
            lines.append("Best configuration with each tried value (geometric mean over size sets):\n\n"
                         + "\n".join(rows))
            untried = [v for v in p.values if str(v) not in per]
            if untried:
                lines.append(f"Not measured ok: {', '.join(map(str, untried[:16]))}"
                             + (" …" if len(untried) > 16 else ""))
    elif live is None:
        lines.append("No tuning result yet.")
    return "\n\n".join(lines)


def hover(docs: Documents, doc: Doc, results: Results, pos: lsp.Position, encoding: str) -> lsp.Hover | None:
    if doc.cf is None:
        return None
    line = pos.line
    col = doc.index.byte_col(line, pos.character, encoding)
    for k in doc.cf.kernels:
        if span_contains(k.name_span, line, col):
            facts = kernel_facts(docs, doc, k)
            return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown,
                                                        value=kernel_markdown(doc, k, facts, results)),
                             range=doc.index.range(k.name_span, encoding))
    for k in doc.cf.kernels:  # a tunable: in the kernel, at a launch, in a #define, in the spec comment, ...
        facts = kernel_facts(docs, doc, k)
        for site in facts.sites:
            if site.param in facts.params and span_contains(site.span, line, col):
                return lsp.Hover(contents=lsp.MarkupContent(
                    kind=lsp.MarkupKind.Markdown,
                    value=param_markdown(doc, k, facts, site.param, site.original_text, results)),
                    range=doc.index.range(site.span, encoding))
    return None
