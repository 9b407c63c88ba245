"""Code lenses above each __global__ kernel: Optimize, Templatize, Apply best / tuning progress / Cancel."""

from __future__ import annotations

from lsprotocol import types as lsp

from agent_core.model import params_words

from . import commands
from .documents import Doc
from .results import Results


def _fmt_x(x: float | None) -> str:
    return f"{x:.2f}x" if x else "no speedup"


def code_lenses(doc: Doc, results: Results, encoding: str, codicons: bool = False) -> list[lsp.CodeLens]:
    """The lenses of every kernel; ``codicons``: the client renders ``$(icon)`` in titles (VS Code)."""
    if doc.cf is None:
        return []
    out: list[lsp.CodeLens] = []
    for k in doc.cf.kernels:
        pos = doc.index.position(k.span.line, k.span.col, encoding)
        rng = lsp.Range(start=pos, end=pos)
        args = [doc.uri, k.name]

        def lens(title: str, cmd: str) -> None:
            out.append(lsp.CodeLens(range=rng, command=lsp.Command(title=title, command=cmd, arguments=args)))

        live = results.live.get((doc.path, k.name))
        if live is not None and not live.finished:
            best = f", best {live.speedup:.2f}x" if live.speedup else ""
            spin = "$(sync~spin) " if codicons else ""
            lens(f"{spin}Tuning {live.done}/{live.total}{best}", commands.SHOW_RESULT)
            lens("Cancel tuning", commands.CANCEL)
            continue
        lens("Optimize kernel", commands.OPTIMIZE)
        lens("Templatize", commands.TEMPLATIZE)
        s = results.summary(doc, k.name)
        if s and s.get("best_params"):
            if s.get("applied"):
                d = s.get("dispatch")
                what = (f"per-shape dispatch of {len(d.get('entries') or [])}, {_fmt_x(d.get('speedup'))}" if d
                        else f"{_fmt_x(s.get('speedup'))}, {params_words(s.get('best_params'))}")
                lens(f"Applied best ({what})", commands.SHOW_RESULT)
            elif s.get("stale"):
                lens(f"Result stale ({_fmt_x(s.get('speedup'))}, file changed): re-optimize", commands.OPTIMIZE)
            elif s.get("dispatch") and all(e.get("origin") == "original" for e in s["dispatch"].get("entries") or []):
                lens("Original kept (no configuration faster beyond the noise)", commands.SHOW_RESULT)
            elif s.get("dispatch"):
                d = s["dispatch"]
                kept = len(d.get("original_kept") or [])
                lens(f"Apply best ({_fmt_x(d.get('speedup'))}, per-shape dispatch of {len(d.get('entries') or [])}"
                     + (f", original kept on {kept}" if kept else "") + ")", commands.APPLY_BEST)
            elif s.get("best_params") != s.get("original_params"):
                lens(f"Apply best ({_fmt_x(s.get('speedup'))})", commands.APPLY_BEST)
            else:
                lens("Already at the best configuration found", commands.SHOW_RESULT)
    return out
