"""Inlay hints beside each tunable value: the best value found (`→ 512`), live while a session runs."""

from __future__ import annotations

from lsprotocol import types as lsp

from .analysis import facts_and_shift
from .documents import Doc, Documents
from .results import Results


def best_params(doc: Doc, kernel: str, results: Results) -> tuple[dict | None, str]:
    """(params, note) of the live best while tuning, else of the stored result."""
    live = results.live.get((doc.path, kernel))
    if live is not None and not live.finished and live.best is not None:
        sp = f"{live.speedup:.2f}x" if live.speedup else ""
        return live.best.params, f"best so far ({live.done}/{live.total}) {sp}"
    s = results.summary(doc, kernel)
    if not s or not s.get("best_params") or s.get("applied"):  # applied: the file holds the best values
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
        facts, dl = facts_and_shift(docs, doc, k)  # dl: lines the kernel moved since (see analysis)
        stale = "stale" in note
        for site in facts.sites:
            line = site.span.end_line + dl
            if line < first or line > last or site.param not in params:
                continue
            value = params[site.param]
            label = f"→ {value}" + ("?" if stale else "")
            tip = f"kerntune: {site.param} = {value}, {note} (original {site.original_text})"
            out.append(lsp.InlayHint(position=doc.index.position(line, site.span.end_col, encoding),
                                     label=label, kind=lsp.InlayHintKind.Parameter, padding_left=True,
                                     tooltip=tip))
    return out
