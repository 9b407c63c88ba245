"""Code actions on a kernel: the "Create tuning spec" quick fix, Templatize, Optimize, Apply best, Cancel."""

from __future__ import annotations

import logging

from lsprotocol import types as lsp

from agent_core.model import KerntuneError

from . import commands
from .documents import Doc
from .edits import spec_text, workspace_edit
from .results import Results

log = logging.getLogger(__name__)
KERNTUNE_KIND = "refactor.kerntune"


def _kernel_at(doc: Doc, line: int):
    if doc.cf is None:
        return None
    for k in doc.cf.kernels:
        if k.span.line - 12 <= line <= k.span.end_line:  # the spec comment above counts too
            return k
        if any(s.span.line <= line <= s.span.end_line for s in k.launch_sites + k.macro_launch_sites):
            return k
    return None


def code_actions(doc: Doc, results: Results, params: lsp.CodeActionParams, encoding: str) -> list[lsp.CodeAction]:
    out: list[lsp.CodeAction] = []
    only = params.context.only
    for d in params.context.diagnostics:
        if d.source == "kerntune" and d.code == "missing-spec" and isinstance(d.data, dict):
            kernel = d.data.get("kernel")
            try:
                edit = workspace_edit(doc, spec_text(doc, kernel), encoding)
            except KerntuneError as e:
                log.info("no spec quick fix: %s", e)
                continue
            out.append(lsp.CodeAction(title=f"Create tuning spec for '{kernel}'", kind=lsp.CodeActionKind.QuickFix,
                                      diagnostics=[d], edit=edit, is_preferred=True))
    k = _kernel_at(doc, params.range.start.line)
    if k is not None:
        args = [doc.uri, k.name]
        live = results.live.get((doc.path, k.name))

        def cmd(title, command, kind=KERNTUNE_KIND):
            out.append(lsp.CodeAction(title=title, kind=kind,
                                      command=lsp.Command(title=title, command=command, arguments=args)))

        if live is not None and not live.finished:
            cmd(f"kerntune: Cancel tuning '{k.name}'", commands.CANCEL)
        else:
            cmd(f"kerntune: Optimize kernel '{k.name}'", commands.OPTIMIZE)
        cmd(f"kerntune: Templatize '{k.name}' (open the template and its parameter space)", commands.TEMPLATIZE)
        s = results.summary(doc, k.name)
        if s and s.get("best_params") and not s.get("stale") and s.get("best_params") != s.get("original_params"):
            sp = f" ({s['speedup']:.2f}x)" if s.get("speedup") else ""
            cmd(f"kerntune: Apply best configuration{sp}", commands.APPLY_BEST, lsp.CodeActionKind.RefactorRewrite)
    if only:
        out = [a for a in out if any(a.kind == o or (a.kind or "").startswith(o + ".") for o in only)]
    return out
