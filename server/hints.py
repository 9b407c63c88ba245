"""Inlay hints beside each tunable value: the best value found (`→ 512`), live while a session runs."""

from __future__ import annotations

from lsprotocol import types as lsp

from .analysis import kernel_facts
from .documents import Doc, Documents
from .results import Results


def best_params(doc: Doc, kernel: str, results: Results) -> tuple[dict | None, str]:
    """(params, note) of the live best while tuning, else of the stored result."""
    live = results.live.get((doc.path, kernel))
    if live is not None and not live.finished and live.best is not None:
        sp = f"{live.speedup:.2f}x" if live.speedup else ""
        return live.best.params, f"best so far ({live.done}/{live.total}) {sp}"
    s = results.summary(doc, kernel)
    if not s or not s.get("best_params"):
        return None, ""
    note = f"best found on {s.get('device')}"
    if s.get("speedup"):
        note += f", {s['speedup']:.2f}x"
    if s.get("stale"):
        note += " (stale: the file changed since it was measured)"
    return s["best_params"], note


def inlay_hints(docs: Documents, doc: Doc, results: Results, rng: lsp.Range, encoding: str) -> list[lsp.InlayHint]:
    if doc.cf is None:
        return []
    first, last = rng.start.line, rng.end.line
    out: list[lsp.InlayHint] = []
    for k in doc.cf.kernels:
        params, note = best_params(doc, k.name, results)
        if not params:
            continue
        facts = kernel_facts(docs, doc, k)
        for site in facts.sites:
            if site.span.end_line < first or site.span.end_line > last or site.param not in params:
                continue
            value = params[site.param]
            stale = "stale" in note
            label = f"→ {value}" + ("?" if stale else "")
            tip = f"kerntune: {site.param} = {value}, {note} (original {site.original_text})"
            out.append(lsp.InlayHint(position=doc.index.position(site.span.end_line, site.span.end_col, encoding),
                                     label=label, kind=lsp.InlayHintKind.Parameter, padding_left=True,
                                     tooltip=tip))
    return out
